"""Writing a tuning run's results: a whole GPT `.nemo` (fine-tuning, a merged LoRA model) or a small file of the
method's own tensors (an adapter file), each with its room checked first and a failure said in one line (exit 74).

    save_model(model, nemo_config, path, stage, placement)      # collective: every rank calls it
    with saving(path, needed_bytes, stage): save_nemo(path, config, state)
"""

import shutil
from pathlib import Path

import torch


def save_model(model: torch.nn.Module, nemo_config: dict, path: str, stage: str, placement) -> None:
    """Writes `model` as a .nemo with the base model's config: one state dict for TP=1, one shard per TP rank
    otherwise (the layout the model was trained in). A write that fails for lack of space or permission raises
    StorageFault; an earlier file at `path` is then unchanged."""
    from megatron.core import parallel_state

    from ..core.nemo_archive import save_nemo, write_nemo

    tp = parallel_state.get_tensor_model_parallel_world_size()
    tp_rank, dp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_data_parallel_rank()
    # Host copies: a .nemo must load on machines without this job's GPUs.
    state = {k: v.cpu() for k, v in model.state_dict().items() if not k.endswith("._extra_state")}
    # The weights are written twice before the archive is renamed into place: saved, then packed.
    needed = 2 * tp * sum(t.numel() * t.element_size() for t in state.values())
    if tp == 1:
        if placement.rank == 0:
            with saving(path, needed, stage):
                save_nemo(path, nemo_config, state)
    else:
        staging = Path(path).parent / f".{Path(path).name}.shards"
        if dp_rank == 0:
            with saving(path, needed, stage):
                staging.mkdir(parents=True, exist_ok=True)
                torch.save(state, staging / f"tp{tp_rank}.pt")
        torch.distributed.barrier()
        if placement.rank == 0:
            config = dict(nemo_config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=1)
            try:
                with saving(path, 0, stage):  # the room was checked before the shards were written
                    write_nemo(path, config, {(t, 0): staging / f"tp{t}.pt" for t in range(tp)})
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    if placement.world_size > 1:
        torch.distributed.barrier()


def saving(path: str, needed: int, stage: str):
    """Around one write of a tuning result: room checked first, a failure for lack of space or permission said in
    one line (exit 74) instead of a traceback."""
    from ..common.storage import guarded_write, with_margin

    folder = Path(path).parent
    advice = (
        f"Nothing was written to {path} (an earlier file there is unchanged). Free space there, or point "
        f"exp_manager.explicit_log_dir (or base_results_dir) at a larger file system, then run the {stage} job "
        "again: it resumes from its last checkpoint and writes the result."
    )
    return guarded_write(folder, with_margin(needed) if needed else 0, f"the {stage} result {Path(path).name}", advice)


def tensor_bytes(state) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())
