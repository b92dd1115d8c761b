"""Pieces every job program shares: reading the resolved config, joining the process group,
running megatron-core on a CPU, loading tokenizers from files, and choosing a data blend.

Each module imports its heavy dependencies (torch, megatron, tokenizers) itself, so a program
pays only for what it uses, and `data_blend` stays importable without torch.
"""
