"""The reference the conversion tests compare against: logits of a training checkpoint, computed with the
trainer's own code (its process setup, its model parts at the training layout, its checkpoint structure
and strict loading, as the core's TrainingModule.load_model_state does), none of the conversion code.

    python -m tests.jobs.checkpoint_logits <training hydra.yaml> <step folder> <tokens.pt> <out.pt>
    torchrun --standalone --nproc_per_node=2 -m tests.jobs.checkpoint_logits ...         (a TP=2 run)

Rank 0 writes the logits over the full padded vocabulary, gathered from the tensor-parallel ranks.
"""
import sys


def main(config_path: str, checkpoint: str, tokens_path: str, out_path: str) -> None:
    import torch
    from megatron.core import dist_checkpointing, parallel_state

    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.jobs.core.parts import build_parts, init_processes, shutdown
    from nemo_launcher.jobs.gpt.recipe import GPT

    cfg = TrainingConfig.from_dict(load_resolved_config(config_path))
    placement = placement_from_env()
    on_gpu = init_processes(GPT, cfg, placement)
    parts = build_parts(GPT, cfg, placement, on_gpu)
    assert parts.layout["pp"] == 1, "the reference handles tensor parallelism only"
    template = {"state_dict": {f"model{i}": chunk.sharded_state_dict() for i, chunk in enumerate(parts.bare_chunks)}}
    loaded = dist_checkpointing.load(template, checkpoint)
    for i, chunk in enumerate(parts.bare_chunks):
        chunk.load_state_dict(loaded["state_dict"][f"model{i}"], strict=True)
    model = parts.bare_chunks[0].eval()
    tokens = torch.load(tokens_path)
    positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    with torch.no_grad():
        local = model(tokens, positions, None).float().contiguous()
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if tp > 1:  # each rank holds a slice of the vocabulary
        pieces = [torch.empty_like(local) for _ in range(tp)]
        torch.distributed.all_gather(pieces, local, group=parallel_state.get_tensor_model_parallel_group())
        local = torch.cat(pieces, dim=-1)
    if placement.rank == 0:
        torch.save(local, out_path)
    shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:5])
