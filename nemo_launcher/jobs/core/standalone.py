"""megatron-core set up for jobs that use a model without training it (conversion, evaluation, serving), any family.

    placement = start_model_parallel(tensor_parallel=1, pipeline_parallel=1)
    model = build_inference_model(model_section, vocab_size, precision="fp32")   # the family's (gpt/inference.py)

The trainer does the same work inside its Lightning strategy; these jobs have no Trainer, so they join
the process group (one process when no launcher variables are set), apply the CPU shim when there is
no GPU, and initialise megatron's parallel state themselves. The layer spec is always megatron-core's
local one: its parameter names are the canonical ones inside our `.nemo` files, and its
sharded-state keys equal the Transformer Engine spec's, so it loads checkpoints trained with either.
"""

import torch

from ..common.config import JobConfigError
from ..common.distributed import Placement, init_process_group, placement_from_env

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def on_gpu() -> bool:
    return torch.cuda.is_available()


def start_model_parallel(tensor_parallel: int, pipeline_parallel: int, seed: int = 1234) -> Placement:
    """Joins the process group and initialises megatron's parallel state for TP x PP (x DP = the rest).

    Idempotent within a process as long as the sizes agree; a second call with other sizes is an error,
    because megatron keeps one global parallel state per process.
    """
    import megatron.core.dist_checkpointing  # noqa: F401  (imported before the shim so it is patched)
    import megatron.core.models.gpt  # noqa: F401
    import megatron.core.pipeline_parallel  # noqa: F401
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    placement = placement_from_env()
    gpu = on_gpu()
    if gpu:
        torch.cuda.set_device(placement.local_rank)
    else:
        from ..common.mcore_cpu import apply_cpu_shim

        apply_cpu_shim()
    init_process_group(placement, "nccl" if gpu else "gloo")
    if parallel_state.model_parallel_is_initialized():
        have = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
        )
        if have != (tensor_parallel, pipeline_parallel):
            raise JobConfigError(
                f"this process already runs TP({have[0]}) x PP({have[1]}); "
                f"cannot also run TP({tensor_parallel}) x PP({pipeline_parallel})"
            )
        return placement
    world = placement.world_size
    if world % (tensor_parallel * pipeline_parallel):
        raise JobConfigError(
            f"TP({tensor_parallel}) x PP({pipeline_parallel}) = {tensor_parallel * pipeline_parallel} "
            f"does not divide the {world} processes started"
        )
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor_parallel, pipeline_model_parallel_size=pipeline_parallel
    )
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    return placement


def precision_of(state_dict) -> str:
    """'fp32', 'bf16' or 'fp16': the dtype of the stored floating-point weights."""
    for value in state_dict.values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return next(name for name, dtype in PRECISIONS.items() if dtype == value.dtype)
    raise JobConfigError("the state dict holds no floating-point tensor")
