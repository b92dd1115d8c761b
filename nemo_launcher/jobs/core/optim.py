"""Gradient synchronisation and the optimizer: megatron-core DDP around each chunk, megatron-core's Adam.

    ddp = ddp_config(cfg, "bf16", data_parallel_size=dp, on_gpu=True, distributed=True)
    ddp_chunks = wrap_chunks(chunks, config, "bf16", ddp)
    optimizer = build_optimizer(cfg, ddp_chunks, precision="bf16", distributed=True)
    attach_schedule_hooks(config, ddp_chunks, optimizer)

`model.optim.name` maps to megatron-core as follows (the Adams with decoupled weight decay):
| name                   | megatron-core                                       | on a CPU                       |
|------------------------|-----------------------------------------------------|--------------------------------|
| distributed_fused_adam | DistributedOptimizer (ZeRO-1) over fused Adam       | falls back to plain, warns     |
| fused_adam, adamw      | Adam (TE/Apex fused kernel where installed)          | torch AdamW                    |
| sgd (ViT fine-tuning)  | SGD with optim.momentum (TE/Apex fused where there)  | torch SGD                      |

`cfg` is any schema with `model.optim` and `trainer.gradient_clip_val` (every pretraining family, fine-tuning). The
reference's communication keys (GPT: model.optim.overlap_grad_sync/overlap_param_sync/bucket_cap_mb,
model.grad_allreduce_chunk_size_mb, grad_div_ar_fusion, fsdp*, hysteresis, native_amp_*) reach
`ddp_config` and `optimizer_config`; a schema without them gets the behaviour of their reference defaults.
"""

import contextlib
import logging
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the annotation only; megatron-core's DDP module is imported where it is used
    from megatron.core.distributed import DistributedDataParallelConfig

log = logging.getLogger(__name__)


def use_distributed_optimizer(cfg, on_gpu: bool) -> bool:
    if cfg.model.optim.name != "distributed_fused_adam":
        return False
    if not on_gpu:
        # megatron-core's DistributedOptimizer type-checks for torch.cuda.*Tensor parameters.
        log.warning(
            "model.optim.name: distributed_fused_adam needs GPUs; using the non-distributed Adam on this CPU "
            "(same update, optimizer state not sharded across data-parallel ranks)"
        )
        return False
    return True


# The reference's FSDP sharding strategies as megatron-core's FSDP names them.
FSDP_SHARDING = {"full": "optim_grads_params", "grad": "optim_grads"}


def ddp_config(cfg, precision: str, data_parallel_size: int, on_gpu: bool, distributed: bool):
    """megatron-core's DistributedDataParallelConfig from the config. `data_parallel_size` counts the ranks that
    reduce gradients together (data x context parallel)."""
    from megatron.core.distributed import DistributedDataParallelConfig

    model, optim = cfg.model, cfg.model.optim
    fsdp = getattr(model, "fsdp", False)
    # Summing bf16 gradients over hundreds of ranks loses precision: mixed precision reduces in fp32, unless FSDP is
    # told otherwise (fsdp_grad_reduce_dtype).
    reduce_in_fp32 = precision != "fp32" and (not fsdp or model.fsdp_grad_reduce_dtype == 32)
    # Overlap the reduction with the backward pass where there is something to overlap it with.
    overlap_grads = on_gpu and data_parallel_size > 1 and getattr(optim, "overlap_grad_sync", True)
    bucket_mb = model.bucket_mb() if hasattr(model, "bucket_mb") else None
    # NCCL averages inside the collective; gloo has no AVG, so on a CPU the gradients are divided after the sum.
    average_in_collective = on_gpu and getattr(model, "grad_div_ar_fusion", False)
    return DistributedDataParallelConfig(
        grad_reduce_in_fp32=reduce_in_fp32,
        overlap_grad_reduce=overlap_grads,
        overlap_param_gather=distributed and overlap_grads and getattr(optim, "overlap_param_sync", False),
        use_distributed_optimizer=distributed,
        bucket_size=None if bucket_mb is None else bucket_mb * 2**20 // 4,  # elements of fp32 gradients
        average_in_collective=average_in_collective and not fsdp,
        use_megatron_fsdp=fsdp,
        data_parallel_sharding_strategy=FSDP_SHARDING[model.fsdp_sharding_strategy] if fsdp else "no_shard",
        gradient_reduce_div_fusion=average_in_collective if fsdp else True,
    )


def wrap_chunks(
    chunks: list[torch.nn.Module], config, precision: str, ddp: "DistributedDataParallelConfig"
) -> list[torch.nn.Module]:
    """Float16Module (bf16/fp16) then megatron-core DDP (or its FSDP wrapper) around every chunk, as Megatron-LM
    does."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer.module import Float16Module

    wrapper = DistributedDataParallel
    if ddp.use_megatron_fsdp:
        from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel as wrapper
    wrapped = []
    for index, chunk in enumerate(chunks):
        if precision != "fp32":
            chunk = Float16Module(config, chunk)
        # Only the first chunk's buckets are started early; later chunks' gradients arrive together.
        wrapped.append(wrapper(config, ddp, chunk, disable_bucketing=index > 0))
    return wrapped


@contextlib.contextmanager
def parameters_gathered(ddp_chunks: list[torch.nn.Module]):
    """Around evaluation and checkpoint saves: with overlap_param_sync the updated parameters are gathered lazily
    by the next forward's hooks; here they are gathered at once, and the hooks wait until training goes on."""
    lazy = [chunk for chunk in ddp_chunks if chunk.ddp_config.overlap_param_gather]
    for chunk in lazy:
        chunk.disable_forward_pre_hook(param_sync=True)
    try:
        yield
    finally:
        for chunk in lazy:
            chunk.enable_forward_pre_hook()


def optimizer_config(cfg, precision: str, distributed: bool, overlap_param_gather: bool = False):
    from megatron.core.optimizer import OptimizerConfig

    model, optim = cfg.model, cfg.model.optim
    sgd = optim.name == "sgd"  # ViT fine-tuning's (momentum in optim.momentum); every other name is Adam
    return OptimizerConfig(
        optimizer="sgd" if sgd else "adam",
        sgd_momentum=optim.momentum if sgd else 0.9,
        lr=optim.lr,
        min_lr=optim.sched.min_lr,
        weight_decay=optim.weight_decay,
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        decoupled_weight_decay=True,
        clip_grad=cfg.trainer.gradient_clip_val or 0.0,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        params_dtype={"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision],
        use_distributed_optimizer=distributed,
        overlap_param_gather=overlap_param_gather,
        # fp16's dynamic loss scaling (the reference's native_amp_* and hysteresis; megatron-core's defaults are the
        # same).
        initial_loss_scale=float(getattr(model, "native_amp_init_scale", 2.0**32)),
        loss_scale_window=float(getattr(model, "native_amp_growth_interval", 1000)),
        hysteresis=getattr(model, "hysteresis", 2),
    )


def build_optimizer(cfg, ddp_chunks: list[torch.nn.Module], precision: str, distributed: bool):
    from megatron.core.optimizer import get_megatron_optimizer

    overlap = ddp_chunks[0].ddp_config.overlap_param_gather
    optimizer = get_megatron_optimizer(optimizer_config(cfg, precision, distributed, overlap), ddp_chunks)
    if cfg.model.optim.name == "sgd":
        # megatron-core 0.16 gives SGD no state initialiser, and loading a checkpoint calls it to lay out the state
        # it reads into (resuming failed with "'NoneType' object is not callable").
        for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
            inner.init_state_fn = _init_sgd_state
    return optimizer


def _init_sgd_state(optimizer, config=None) -> None:
    """A zero momentum buffer per parameter: torch's SGD then takes the same first step as with none."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if "momentum_buffer" not in optimizer.state[param]:
                optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param.data)


def attach_schedule_hooks(config, ddp_chunks: list[torch.nn.Module], optimizer) -> None:
    """The callbacks megatron-core's pipeline schedules read from the TransformerConfig."""
    from megatron.core.distributed import finalize_model_grads

    single = len(ddp_chunks) == 1
    if ddp_chunks[0].ddp_config.overlap_grad_reduce:
        # Only when reductions overlap the backward pass: without overlap, start_grad_sync is a full blocking
        # all-reduce, and the schedule calling it before finalize_model_grads would reduce everything twice.
        no_sync = [chunk.no_sync for chunk in ddp_chunks]
        grad_sync = [chunk.start_grad_sync for chunk in ddp_chunks]
        config.no_sync_func = no_sync[0] if single else no_sync
        config.grad_sync_func = grad_sync[0] if single else grad_sync
    # All-reduces data-parallel gradients, and the tied embedding's gradients between first and last stage.
    config.finalize_model_grads_func = finalize_model_grads
    # fp16 scales the loss before backward; bf16 and fp32 return it unchanged (scale 1).
    config.grad_scale_func = optimizer.scale_loss if config.fp16 else None


def set_hyperparameters(optimizer, lr: float, weight_decay: float) -> None:
    """Learning rate and weight decay for the next step. megatron's param groups carry lr_mult and wd_mult
    (wd_mult 0 for biases and norm weights), which its own scheduler applies; so do we."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_mult", 1.0)
        group["weight_decay"] = weight_decay * group.get("wd_mult", 1.0)


def describe(optimizer) -> tuple[str, str]:
    """(wrapper class, inner optimizer class) for the first log lines."""
    inner = getattr(optimizer, "chained_optimizers", [optimizer])[0]
    return type(inner).__name__, type(getattr(inner, "optimizer", inner)).__name__
