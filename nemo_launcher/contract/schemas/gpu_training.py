"""The GPU-throughput settings of pretraining, with the reference launcher's key names, torch-free.

    check_gpu_settings(cfg.model, cfg.trainer, "training.model")   # from a family's TrainingConfig.check
    env = training_environment(cfg)                                  # the launcher: what the training job exports
    argv = nsys_argv(cfg.model.nsys_profile, log_dir, rank)          # the profiling wrapper, on the node

A key here is mapped (to megatron-core's TransformerConfig, DistributedDataParallelConfig, OptimizerConfig, its
FSDP wrapper, Transformer Engine's userbuffers, or to the launcher) or it is a *fixed* key: a switch of the
reference's NeMo 1.x trainer that describes something this trainer always does one way. A fixed key is accepted
at that value and refused at any other, with the reason (`check_fixed`). As in the reference, the settings of a
feature that is switched off (fsdp_*, ub_tp_comm_overlap_cfg and tp_comm_atomic_*, nsys_profile.*, fp8_*) bind
and wait for their switch.
"""

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

from ..binding import config_fault, field_fault, non_negative, positive
from ..transformer_engine import check_fp8

# Transformer Engine's GEMMs whose tensor-parallel communication userbuffers can overlap.
UB_GEMMS = (
    "qkv_fprop",
    "qkv_dgrad",
    "qkv_wgrad",
    "proj_fprop",
    "proj_dgrad",
    "fc1_fprop",
    "fc1_dgrad",
    "fc1_wgrad",
    "fc2_fprop",
    "fc2_dgrad",
)
# What `nsys profile -t` can trace on a Linux GPU node.
NSYS_TRACES = (
    "cuda",
    "nvtx",
    "osrt",
    "cudnn",
    "cublas",
    "cublas-verbose",
    "cusparse",
    "cusolver",
    "mpi",
    "ucx",
    "openacc",
    "openmp",
    "opengl",
    "vulkan",
    "nvvideo",
    "none",
)


@dataclasses.dataclass(frozen=True)
class NsysSection:
    """Nsight Systems: the launcher starts the listed ranks under `nsys profile`, and those ranks record
    steps start_step..end_step (global step indices, counted from 0) between cudaProfilerStart/Stop."""

    enabled: bool = False
    start_step: int = 10  # index of the first profiled step
    end_step: int = 10  # index of the last profiled step
    ranks: list[int] = dataclasses.field(default_factory=lambda: [0])  # global ranks that run under nsys
    gen_shape: bool = False  # record input shapes in the NVTX ranges (torch.autograd.profiler.emit_nvtx)
    trace: list[str] = dataclasses.field(default_factory=lambda: ["nvtx", "cuda"])  # nsys profile -t

    def check(self, key: str) -> None:
        non_negative(f"{key}.start_step", self.start_step)
        if self.end_step < self.start_step:
            raise field_fault(self, key, "end_step", f"must be >= start_step ({self.start_step})")
        if not self.ranks or any(r < 0 for r in self.ranks):
            raise field_fault(self, key, "ranks", "list the global ranks to profile, e.g. [0]")
        unknown = [t for t in self.trace if t not in NSYS_TRACES]
        if not self.trace or unknown:
            raise field_fault(self, key, "trace", f"choose from {', '.join(NSYS_TRACES)}")


@dataclasses.dataclass(frozen=True)
class UbGemm:
    """One GEMM's userbuffers setting, passed to transformer_engine.pytorch.initialize_ub as ub_cfgs[gemm]."""

    method: Literal["ring_exchange", "pipeline", "bulk"] = "ring_exchange"
    num_sm: int = 1  # SMs the communication kernel keeps (pipeline and bulk)
    cga_size: int = 1  # thread-block cluster size of the communication kernel
    num_splits: int = 4  # chunks the GEMM is cut into (pipeline)
    set_sm_margin: bool = False  # leave num_sm SMs to the communication kernel while the GEMM runs
    aggregate: bool = False  # ring exchange: aggregate two chunks per step
    atomic_gemm: bool = False  # TE's atomic GEMM (FP8 only)
    fp8_buf: bool = False  # keep the exchange buffer in FP8 (FP8 only)

    def check(self, key: str) -> None:
        positive(f"{key}.num_sm", self.num_sm)
        positive(f"{key}.cga_size", self.cga_size)
        positive(f"{key}.num_splits", self.num_splits)


@dataclasses.dataclass(frozen=True)
class UbOverlapSection:
    """Per-GEMM userbuffers settings; a GEMM left out uses Transformer Engine's default for it."""

    qkv_fprop: UbGemm | None = None
    qkv_dgrad: UbGemm | None = None
    qkv_wgrad: UbGemm | None = None
    proj_fprop: UbGemm | None = None
    proj_dgrad: UbGemm | None = None
    fc1_fprop: UbGemm | None = None
    fc1_dgrad: UbGemm | None = None
    fc1_wgrad: UbGemm | None = None
    fc2_fprop: UbGemm | None = None
    fc2_dgrad: UbGemm | None = None

    def ub_cfgs(self) -> dict[str, dict[str, Any]]:
        """What initialize_ub takes as ub_cfgs: GEMM name -> its settings."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in UB_GEMMS if getattr(self, name) is not None}

    def sm_margin(self) -> int:
        """SMs that LayerNorm kernels leave free while a communication kernel runs beside them."""
        return max(
            (gemm.num_sm for gemm in map(self.__getattribute__, UB_GEMMS) if gemm is not None and gemm.set_sm_margin),
            default=0,
        )


def fixed_fault(key: str, value: Any, expected: Any, why: str):
    """A fixed key at another value than the one this trainer implements: `key=value: why; set ...`."""
    shown = "null" if expected is None else str(expected).lower() if isinstance(expected, bool) else repr(expected)
    return config_fault(key, value, f"{why}; set {shown} or remove the key")


def check_fixed(section, key: str, table: dict[str, tuple[Any, str]]) -> None:
    """Each `name: (value, why)` of `table` must hold in `section` (a bound dataclass)."""
    for name, (expected, why) in table.items():
        value = getattr(section, name)
        if value != expected or type(value) is not type(expected):
            raise fixed_fault(f"{key}.{name}", value, expected, why)


def check_gpu_settings(model, trainer, key: str) -> None:
    """The cross-key rules of the GPU settings of a pretraining `model` section (`key` is its full key)."""
    tp, pp = model.tensor_model_parallel_size, model.pipeline_model_parallel_size
    cp = model.context_parallel_size
    positive(f"{key}.context_parallel_size", cp)
    positive(f"{key}.grad_allreduce_chunk_size_mb", model.grad_allreduce_chunk_size_mb)
    positive(f"{key}.hysteresis", model.hysteresis)
    positive(f"{key}.native_amp_init_scale", model.native_amp_init_scale)
    positive(f"{key}.native_amp_growth_interval", model.native_amp_growth_interval)
    non_negative(f"{key}.gc_interval", model.gc_interval)
    on_cpu = trainer.accelerator == "cpu"
    seq = model.encoder_seq_length
    if cp > 1:
        if seq % (2 * cp):
            raise config_fault(
                f"{key}.encoder_seq_length",
                seq,
                f"must be divisible by 2 x CP({cp}) = {2 * cp}: megatron-core gives each context-parallel "
                "rank two of 2 x CP equal chunks of every sequence",
            )
        if not model.transformer_engine:
            raise config_fault(
                f"{key}.context_parallel_size",
                cp,
                "needs model.transformer_engine: true (only Transformer Engine's attention splits a sequence)",
            )
    if model.sequence_parallel and tp > 1 and (seq // cp) % tp:
        raise config_fault(
            f"{key}.encoder_seq_length",
            seq,
            f"with sequence_parallel each rank's {seq // cp} tokens (seq / CP({cp})) must split over TP({tp})",
        )
    if model.overlap_p2p_comm and model.batch_p2p_comm:
        raise config_fault(
            f"{key}.batch_p2p_comm",
            True,
            "megatron-core cannot batch pipeline sends that overlap_p2p_comm overlaps; set batch_p2p_comm: false",
        )
    _check_fsdp(model, trainer, key, pp)
    _check_tp_overlap(model, key, tp, on_cpu)
    check_fp8(model, trainer, key)
    if model.sharp and on_cpu:
        raise config_fault(f"{key}.sharp", True, "SHARP is an NCCL feature: needs trainer.accelerator: gpu")


def _check_fsdp(model, trainer, key: str, pp: int) -> None:
    if not model.fsdp:
        return
    if trainer.accelerator == "cpu" or not model.transformer_engine:
        raise config_fault(
            f"{key}.fsdp",
            True,
            "megatron-core's FSDP wrapper needs GPUs and Transformer Engine "
            "(trainer.accelerator: gpu, model.transformer_engine: true)",
        )
    if pp > 1:
        raise config_fault(
            f"{key}.fsdp",
            True,
            f"does not combine with pipeline parallelism (PP({pp})), as in the "
            "reference; set pipeline_model_parallel_size: 1 or fsdp: false",
        )
    if model.optim.name != "distributed_fused_adam":
        raise config_fault(
            f"{key}.optim.name",
            model.optim.name,
            "fsdp shards the optimizer state through megatron-core's distributed optimizer: use distributed_fused_adam",
        )
    if model.fsdp_sharding_strategy == "hybrid":
        raise config_fault(
            f"{key}.fsdp_sharding_strategy",
            "hybrid",
            "hybrid (node-local) sharding needs megatron-core's outer data-parallel groups, which this "
            "trainer does not build; use full (parameters, gradients, optimizer) or grad",
        )
    if not model.fsdp_sharded_checkpoint:
        raise config_fault(
            f"{key}.fsdp_sharded_checkpoint",
            False,
            "checkpoints are megatron-core distributed checkpoints, always sharded by rank (a gathered "
            "copy of a model that needs FSDP would not fit one process); set true",
        )


def _check_tp_overlap(model, key: str, tp: int, on_cpu: bool) -> None:
    if not model.ub_tp_comm_overlap:
        return
    if tp < 2 or not model.sequence_parallel:
        raise config_fault(
            f"{key}.ub_tp_comm_overlap",
            True,
            f"overlaps the sequence-parallel all-gathers and reduce-scatters: needs TP > 1 (TP={tp}) "
            "and sequence_parallel: true",
        )
    if on_cpu or not model.transformer_engine:
        raise config_fault(
            f"{key}.ub_tp_comm_overlap",
            True,
            "userbuffers are Transformer Engine's: needs trainer.accelerator: gpu and model.transformer_engine: true",
        )


def check_profile_ranks(profile: NsysSection, world_size: int, key: str) -> None:
    if profile.enabled and any(rank >= world_size for rank in profile.ranks):
        raise field_fault(profile, key, "ranks", f"ranks run from 0 to {world_size - 1} (nodes x devices)")


def ordered_kernel_queue_env(model) -> tuple[tuple[str, str], ...]:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 when the model runs tensor or context parallel: Megatron overlaps their
    communication with compute and needs the kernels queued in order on one hardware queue. The one rule for
    every stage that trains (training, fine-tuning, PEFT), on every backend."""
    if model.tensor_model_parallel_size > 1 or getattr(model, "context_parallel_size", 1) > 1:
        return (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)
    return ()


def training_environment(cfg) -> tuple[tuple[str, str], ...]:
    """What the training job exports: `run.env_vars` (nulls skipped), then what the model's settings require.

    - TP or CP communication overlapped with compute needs kernels queued in order on one hardware queue
      (ordered_kernel_queue_env);
    - with userbuffers, LayerNorm kernels leave the SMs of the communication kernels free
      (NVTE_FWD/BWD_LAYERNORM_SM_MARGIN).
    """
    pairs: dict[str, str] = {}
    for name, value in (getattr(cfg.run, "env_vars", None) or {}).items():
        if value is not None:
            pairs[name] = str(int(value) if isinstance(value, bool) else value)
    model = cfg.model
    pairs.update(ordered_kernel_queue_env(model))
    if getattr(model, "ub_tp_comm_overlap", False):
        overlap = model.ub_tp_comm_overlap_cfg
        margin = str(overlap.sm_margin() if overlap is not None else 0)
        pairs["NVTE_FWD_LAYERNORM_SM_MARGIN"] = margin
        pairs["NVTE_BWD_LAYERNORM_SM_MARGIN"] = margin
    return tuple(pairs.items())


def check_env_names(env: dict[str, Any], key: str) -> None:
    import re

    for name in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise config_fault(f"{key}.{name}", env[name], "environment variable names are letters, digits and _")


# The profiling wrapper: `python3 -m nemo_launcher.jobs.common.nsys_profile` on every rank runs the listed ranks
# under nsys and execs the others' program directly.
NSYS_PROGRAM = "nemo_launcher.jobs.common.nsys_profile"


def profiled_command(
    module: str, args: Iterable[str], profile: NsysSection | None, log_dir: str
) -> tuple[str, tuple[str, ...]]:
    """(module, args) of a job command, wrapped in the profiler when `profile` is enabled."""
    args = tuple(args)
    if profile is None or not profile.enabled:
        return module, args
    wrapper = (
        "--ranks",
        ",".join(map(str, profile.ranks)),
        "--trace",
        ",".join(profile.trace),
        "--output",
        f"{log_dir}/nsys",
        "--",
    )
    return NSYS_PROGRAM, wrapper + (module,) + args


def nsys_argv(trace: str, output_dir: str, rank: int) -> list[str]:
    """`nsys profile` for one rank: recording starts and stops with the trainer's cudaProfilerStart/Stop."""
    return [
        "nsys",
        "profile",
        "--sample=none",
        f"--trace={trace}",
        f"--output={output_dir}/rank{rank}",
        "--force-overwrite=true",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
    ]
