"""Schema of the resolved `training` section of the GPT family (conf/_family/gpt3_training.yaml).

    cfg = TrainingConfig.from_dict(section)        # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

Every key the family config holds is declared here with its unit; `bind` refuses any other key. The layout
rules (TP x PP dividing the GPUs, heads and layers divisible, the global batch splitting over data-parallel
ranks, ramp-up steps) are checked against trainer.num_nodes x trainer.devices at bind time, so the launcher
refuses what Megatron would refuse hours later in the queue.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, non_negative, positive, positive_fields
from ..tokenizers import MEGATRON_TYPE_FILES, TokenizerLibrary
from .common_training import (
    CheckpointParams,
    DataloaderType,
    DecoderStackSection,
    ExpManagerSection,
    OptimSection,
    TextPretrainingConfig,
    TrainerSection,
    blend,
    check_indexed_loader,
    check_splits,
    data_reads,
)
from .gpu_training import NsysSection, UbOverlapSection, check_fixed, check_gpu_settings, check_profile_ranks
from .moe import MixtureOfExperts, check_experts_on_cpu

STAGE = "training"
Activation = Literal["gelu", "fast-swiglu", "squared-relu"]
Normalization = Literal["layernorm", "layernorm1p", "rmsnorm"]


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    library: TokenizerLibrary
    type: str | None = None  # library megatron: GPT2BPETokenizer
    model: str | None = None  # sentencepiece .model or huggingface tokenizer.json
    vocab_file: str | None = None  # library megatron: GPT-2 vocab.json
    merge_file: str | None = None  # library megatron: GPT-2 merges.txt
    delimiter: str | None = None  # fixed: null (the reference's tabular tokenizer reads it; no tokenizer here does)

    def check(self, key: str) -> None:
        check_fixed(
            self,
            key,
            {
                "delimiter": (
                    None,
                    "only NeMo's tabular tokenizer reads a delimiter, and none of the "
                    "tokenizers here (GPT-2 BPE, SentencePiece, tokenizer.json) does",
                )
            },
        )
        for name in _tokenizer_file_keys(self.library):
            if not getattr(self, name):
                raise config_fault(
                    f"{key}.{name}", getattr(self, name), f"tokenizer library {self.library} needs this file"
                )


@dataclasses.dataclass(frozen=True)
class DataSection:
    seq_length: int  # tokens per sample; must equal model.encoder_seq_length
    splits_string: str = "99990,8,2"  # train,validation,test weights of each file's documents
    num_workers: int = 2  # DataLoader worker processes per rank
    dataloader_type: DataloaderType = "single"  # single: dataset order; cyclic: reshuffled each pass; LDDL: refused
    reset_position_ids: bool = False  # positions restart after each end-of-document token
    reset_attention_mask: bool = False  # tokens attend only within their document (local layer spec only)
    eod_mask_loss: bool = False  # no loss on end-of-document tokens
    index_mapping_dir: str | None = None  # megatron-core's index cache; null = beside each data file
    data_prefix: list[float | str] | None = None  # [weight, prefix, ...]; null = automatic blend
    # megatron-core reads .bin files memory-mapped (GPTDatasetConfig.mmap_bin_files); Megatron-LM's older
    # lazy/cached formats are gone from it.
    data_impl: Literal["mmap"] = "mmap"
    skip_warmup: bool = True  # fixed: true (megatron-core's indexed dataset has no warm-up pass over the mmap)

    def check(self, key: str) -> None:
        check_fixed(
            self, key, {"skip_warmup": (True, "megatron-core's indexed dataset has no warm-up read of its files")}
        )
        check_indexed_loader(self, key)
        positive(f"{key}.seq_length", self.seq_length)
        non_negative(f"{key}.num_workers", self.num_workers)
        check_splits(f"{key}.splits_string", self.splits_string)
        if self.data_prefix is not None:
            self.blend(key)

    def blend(self, key: str = "training.model.data") -> list[float | str]:
        return blend(self.data_prefix, f"{key}.data_prefix")


@dataclasses.dataclass(frozen=True)
class GptOptimSection(OptimSection):
    """The optimizer, and how megatron-core DDP and the distributed optimizer move gradients and parameters."""

    bucket_cap_mb: int = 400  # gradient bucket (MB of fp32 gradients) with distributed_fused_adam
    overlap_grad_sync: bool = True  # reduce gradient buckets during the backward pass (GPUs, DP x CP > 1)
    overlap_param_sync: bool = True  # distributed_fused_adam: all-gather updated parameters during the next forward
    contiguous_grad_buffer: bool = True  # fixed: true (megatron-core DDP keeps every gradient in one buffer)
    contiguous_param_buffer: bool = True  # fixed: true (the distributed optimizer gathers into one buffer)

    def check(self, key: str) -> None:
        super().check(key)
        positive(f"{key}.bucket_cap_mb", self.bucket_cap_mb)
        check_fixed(
            self,
            key,
            {
                "contiguous_grad_buffer": (
                    True,
                    "megatron-core DDP always keeps gradients in contiguous bucket buffers",
                ),
                "contiguous_param_buffer": (
                    True,
                    "megatron-core's distributed optimizer always gathers parameters into contiguous buffers",
                ),
            },
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSection(DecoderStackSection, MixtureOfExperts):
    tokenizer: TokenizerSection
    optim: GptOptimSection
    data: DataSection
    rampup_batch_size: list[int] | None = None  # [start, increment, ramp-up samples]
    encoder_seq_length: int = 2048  # tokens per sample
    max_position_embeddings: int = 2048  # rows of the learned position table
    num_query_groups: int | None = None  # grouped-query attention; null = one group per head
    normalization: Normalization = "layernorm"  # layernorm1p = LayerNorm with zero-centred gamma
    bias: bool = True  # bias terms in the linear layers
    activation: Activation = "gelu"
    rotary_percentage: float = 1.0  # share of each head's channels rotated (rope only)
    rope_scaling: bool = False  # rope: Llama 3.1's frequency scaling, as megatron-core applies it (context 8192)
    rope_scaling_factor: float = 8.0  # rope_scaling: the factor the low frequencies are divided by
    # Token rows of the model before padding; null = the tokenizer's size. An imported Hugging Face model keeps its
    # own (config.json's vocab_size, often above its tokenizer's), which an export back writes again.
    vocab_size: int | None = None
    rotary_base: float = 10000.0  # base of the rotary frequencies (rope only; Llama 3 500000, Qwen2 1000000)
    qkv_bias: bool = False  # bias terms on the query, key and value projections even with bias: false (Qwen2)
    overlap_p2p_comm: bool = False  # overlap pipeline sends with compute; interleaved schedule only
    fp8: bool = False  # FP8 GEMMs through Transformer Engine (Hopper)
    fp8_e4m3: bool = False  # e4m3 for every FP8 tensor; takes precedence over fp8_hybrid
    fp8_hybrid: bool = True  # e4m3 forward, e5m2 gradients (the usual recipe)
    fp8_margin: int = 0
    fp8_interval: int = 1
    fp8_amax_history_len: int = 1024
    fp8_amax_compute_algo: Literal["max", "most_recent"] = "max"
    fp8_wgrad: bool = True  # FP8 also for the weight-gradient GEMMs (false: those in higher precision)

    # Context parallelism: each sequence is split over CP ranks (Transformer Engine's attention); the data-parallel
    # size is nodes x devices / (TP x PP x CP).
    context_parallel_size: int = 1
    # What megatron-core's TransformerConfig, DDP and optimizer are told (see gpu_training.py and the README table).
    apply_query_key_layer_scaling: bool = False  # fp16 only: scale attention scores by 1/layer before the softmax
    batch_p2p_comm: bool = True  # pipeline sends and receives as one batched call
    sync_batch_comm: bool = False  # synchronise the device after batched pipeline calls (an old NCCL workaround)
    bias_activation_fusion: bool = True  # fused bias + GeLU/SwiGLU kernel (GPUs; gelu with bias, or fast-swiglu)
    bias_dropout_add_fusion: bool = True  # fused bias + dropout + residual add (GPUs)
    masked_softmax_fusion: bool = True  # fused scale + mask + softmax of the local attention (GPUs)
    persist_layer_norm: bool = True  # persistent LayerNorm kernel of the local spec (GPUs)
    gradient_accumulation_fusion: bool = True  # weight gradients accumulated inside the GEMM (GPUs, Transformer Engine)
    fp16_lm_cross_entropy: bool = False  # cross entropy on the half-precision logits (fp16/bf16 runs)
    fp32_residual_connection: bool = False  # keep the residual stream in fp32
    tp_comm_atomic_ag: bool = False  # userbuffers: atomic GEMM for the all-gather overlap (FP8)
    tp_comm_atomic_rs: bool = False  # userbuffers: atomic GEMM for the reduce-scatter overlap (FP8)
    ub_tp_comm_overlap: bool = False  # overlap TP communication with GEMMs (Transformer Engine userbuffers)
    ub_tp_comm_overlap_cfg: UbOverlapSection | None = None  # per-GEMM userbuffers settings
    hysteresis: int = 2  # fp16: overflowing steps tolerated before the loss scale is lowered
    native_amp_init_scale: float = 4294967296.0  # fp16: initial loss scale (2^32)
    native_amp_growth_interval: int = 1000  # fp16: steps without overflow before the loss scale doubles
    grad_allreduce_chunk_size_mb: int = 125  # gradient bucket (MB of fp32 gradients) without distributed_fused_adam
    grad_div_ar_fusion: bool = True  # average gradients inside the collective (NCCL's AVG) instead of dividing after
    fsdp: bool = False  # megatron-core FSDP (ZeRO-3) instead of DDP
    fsdp_sharding_strategy: Literal["full", "grad", "hybrid"] = (
        "full"  # full: params, grads, optimizer; grad: grads, optimizer
    )
    fsdp_grad_reduce_dtype: Literal[32, 16, "bf16"] = 32  # fsdp: gradients are reduced in fp32 (32) or in bf16
    fsdp_sharded_checkpoint: bool = False  # fsdp: must be true (checkpoints are always sharded by rank)
    sharp: bool = False  # SHARP (in-network reductions) for the data-parallel groups; needs NCCL's CollNet plugin
    gc_interval: int = 0  # Python garbage collection every N steps on all ranks at once; 0 = Python's own schedule
    apex_transformer_log_level: Literal[0, 10, 20, 30, 40, 50] = 30  # logging level of megatron-core's loggers
    nsys_profile: NsysSection = dataclasses.field(default_factory=NsysSection)
    resume_from_checkpoint: str | None = None  # step-<N> checkpoint folder to start from when the run has none
    # Continued pretraining: a complete checkpoint folder whose weights (only) a run without a checkpoint of its own
    # starts from, e.g. conversion_hf2nemo's <results_dir>/results/checkpoints/step-0 of an imported model.
    restore_from_path: str | None = None
    # Fixed keys: NeMo 1.x switches describing what this trainer always does (see FIXED_MODEL_KEYS).
    mcore_gpt: bool = True
    megatron_amp_O2: bool = True
    gradient_as_bucket_view: bool = True
    pre_process: bool = True
    post_process: bool = True
    onnx_safe: bool = False
    activations_checkpoint_layers_per_pipeline: int | None = None
    num_micro_batches_with_partial_activation_checkpoints: int | None = None

    def check(self, key: str) -> None:
        check_fixed(self, key, FIXED_MODEL_KEYS)
        positive_fields(self, key, "fp8_interval", "fp8_amax_history_len")
        if not 0.0 < self.rotary_percentage <= 1.0:
            raise field_fault(self, key, "rotary_percentage", "must be in (0, 1]")
        positive(f"{key}.rope_scaling_factor", self.rope_scaling_factor)
        if self.vocab_size is not None:
            positive(f"{key}.vocab_size", self.vocab_size)
        if self.num_query_groups is not None:
            positive(f"{key}.num_query_groups", self.num_query_groups)
            if self.num_attention_heads % self.num_query_groups:
                raise field_fault(
                    self, key, "num_query_groups", f"must divide num_attention_heads ({self.num_attention_heads})"
                )
        positive(f"{key}.rotary_base", self.rotary_base)
        self.check_experts(key)
        super().check(key)
        if self.overlap_p2p_comm and self.virtual_pipeline_size() == 1:
            raise config_fault(
                f"{key}.overlap_p2p_comm",
                True,
                "only works with the interleaved schedule (virtual_pipeline_model_parallel_size > 1); set false",
            )
        if self.fp8 and not (self.fp8_e4m3 or self.fp8_hybrid):
            raise config_fault(
                f"{key}.fp8",
                True,
                "needs a format: fp8_e4m3 (e4m3 everywhere) or fp8_hybrid (e4m3 forward, e5m2 gradients)",
            )
        if self.restore_from_path is not None:
            self.check_restore_path(key)
        if self.rampup_batch_size is not None:
            ramp = self.rampup_batch_size
            if len(ramp) != 3 or any(v <= 0 for v in ramp):
                raise config_fault(
                    f"{key}.rampup_batch_size",
                    ramp,
                    "use [start, increment, ramp-up samples], e.g. [256, 128, 50000000]",
                )
            start, increment, _ = ramp
            if start > self.global_batch_size or (self.global_batch_size - start) % increment:
                raise config_fault(
                    f"{key}.rampup_batch_size",
                    ramp,
                    f"global_batch_size({self.global_batch_size}) must be start({start}) + k x increment({increment})",
                )

    def check_restore_path(self, key: str) -> None:
        if self.resume_from_checkpoint is not None:
            raise config_fault(
                f"{key}.restore_from_path",
                self.restore_from_path,
                "set it or resume_from_checkpoint, not both: resume_from_checkpoint continues a run (optimizer and "
                "step), restore_from_path starts a new one from the weights",
            )
        if self.restore_from_path.endswith(".nemo"):
            raise config_fault(
                f"{key}.restore_from_path",
                self.restore_from_path,
                "name a checkpoint folder, not a .nemo: conversion_hf2nemo writes one beside its .nemo "
                "(<results_dir>/results/checkpoints/step-0)",
            )

    def bucket_mb(self) -> int:
        """MB of fp32 gradients per DDP bucket: the reference's two keys, one per optimizer kind."""
        return (
            self.optim.bucket_cap_mb
            if self.optim.name == "distributed_fused_adam"
            else self.grad_allreduce_chunk_size_mb
        )

    def batch_sizes(self) -> list[int]:
        """Every global batch size the run uses: the ramp-up's steps, then global_batch_size."""
        if self.rampup_batch_size is None:
            return [self.global_batch_size]
        start, increment, _ = self.rampup_batch_size
        return list(range(start, self.global_batch_size + 1, increment))


FIXED_MODEL_KEYS = {
    "mcore_gpt": (True, "the model is always megatron-core's GPTModel (NeMo 1.x's legacy GPT is not available)"),
    "megatron_amp_O2": (
        True,
        "mixed precision is always O2 here: bf16/fp16 weights (Float16Module) with fp32 master "
        "weights in megatron-core's optimizer",
    ),
    "gradient_as_bucket_view": (True, "megatron-core DDP always keeps each gradient as a view of its bucket"),
    "pre_process": (
        True,
        "each pipeline stage's share (embedding on the first, loss on the last) is set by the trainer",
    ),
    "post_process": (
        True,
        "each pipeline stage's share (embedding on the first, loss on the last) is set by the trainer",
    ),
    "onnx_safe": (False, "ONNX export is no stage here (the export stage writes a Triton model repository)"),
    "activations_checkpoint_layers_per_pipeline": (
        None,
        "megatron-core has no such setting: activations_checkpoint_num_layers already counts per pipeline stage",
    ),
    "num_micro_batches_with_partial_activation_checkpoints": (
        None,
        "megatron-core has no partial recompute by microbatch; use activations_checkpoint_granularity",
    ),
}


@dataclasses.dataclass(frozen=True)
class StepTiming:
    """How train_step_timing is measured (the reference's step timer)."""

    sync_cuda: bool = True  # wait for the GPU at each step's start and end, so the time is the step's own
    buffer_size: int = 5  # train_step_timing is the mean of the last N steps

    def check(self, key: str) -> None:
        positive(f"{key}.buffer_size", self.buffer_size)


@dataclasses.dataclass(frozen=True)
class GptCheckpointParams(CheckpointParams):
    # Which complete checkpoints prune keeps: step/max keeps the newest save_top_k; val_loss/min keeps the
    # save_top_k of lowest validation loss and always the newest one. A checkpoint's loss is that of the validation
    # at its step (of its own weights) where one runs there, else the newest one before it.
    monitor: Literal["step", "val_loss"] = "step"
    mode: Literal["min", "max"] | None = None  # null: the monitor's own direction (step max, val_loss min)
    model_parallel_size: int | None = None  # if set, must equal TP x PP (the reference's checkpoint layout key)
    filename: str | None = None  # fixed: null (checkpoint folders are step-<N>, what resuming and conversion read)
    always_save_nemo: bool = False  # fixed: false (the conversion stage writes the .nemo)
    save_nemo_on_train_end: bool = False  # fixed: false (the conversion stage writes the .nemo)

    def check(self, key: str) -> None:
        super().check(key)
        nemo = "the .nemo archive is the conversion stage's output (stages=[training,conversion])"
        check_fixed(
            self,
            key,
            {
                "filename": (
                    None,
                    "checkpoint folders are always step-<N>: resuming and the conversion stage find them by that name",
                ),
                "always_save_nemo": (False, nemo),
                "save_nemo_on_train_end": (False, nemo),
            },
        )
        if (self.monitor, self.mode) in (("step", "min"), ("val_loss", "max")):
            kept = "newest checkpoints (mode max)" if self.monitor == "step" else "lowest validation losses (mode min)"
            raise field_fault(
                self, key, "mode", f"monitor: {self.monitor} keeps the {kept}; set mode to match, or null"
            )
        if self.model_parallel_size is not None:
            positive(f"{key}.model_parallel_size", self.model_parallel_size)


@dataclasses.dataclass(frozen=True)
class GptExpManagerSection(ExpManagerSection):
    checkpoint_callback_params: GptCheckpointParams
    step_timing_kwargs: StepTiming = dataclasses.field(default_factory=StepTiming)
    exp_dir: str | None = None  # fixed: null (explicit_log_dir is where results go)
    name: str | None = None  # fixed: null (NeMo names a folder under exp_dir with it; run.name names the run here)

    def check(self, key: str) -> None:
        where = "results go to exp_manager.explicit_log_dir (set that)"
        check_fixed(
            self,
            key,
            {
                "exp_dir": (None, where),
                "name": (None, f"NeMo names the folder under exp_dir with it; {where}, and run.name names the run"),
            },
        )


@dataclasses.dataclass(frozen=True)
class GptTrainerSection(TrainerSection):
    # Fixed keys: what Lightning would otherwise do is done by this trainer's own parts.
    enable_checkpointing: bool = False
    logger: bool = False
    max_epochs: int | None = None
    use_distributed_sampler: bool = False

    def check(self, key: str) -> None:
        super().check(key)
        check_fixed(
            self,
            key,
            {
                "enable_checkpointing": (
                    False,
                    "checkpoints are exp_manager's (create_checkpoint_callback, checkpoint_callback_params)",
                ),
                "logger": (False, "loggers are exp_manager's (create_tensorboard_logger, create_wandb_logger)"),
                "use_distributed_sampler": (
                    False,
                    "the trainer's samplers split batches by data-parallel rank (ranks of one "
                    "model copy read the same data)",
                ),
            },
        )

    def check_run_length(self, key: str) -> None:
        """max_steps sizes the run; max_epochs is the seed's key, refused here (a family whose job counts its data
        set's samples accepts it instead: stable_diffusion_training.py)."""
        super().check_run_length(key)
        check_fixed(
            self,
            key,
            {"max_epochs": (None, "a run is sized in optimizer steps (trainer.max_steps), its dataset built for them")},
        )


def _tokenizer_file_keys(library: str) -> tuple[str, ...]:
    """GPT's megatron tokenizer is GPT-2 BPE (vocab and merges); the other libraries read one model file."""
    return MEGATRON_TYPE_FILES["GPT2BPETokenizer"] if library == "megatron" else ("model",)


def tokenizer_files(tokenizer: TokenizerSection, key: str) -> list[tuple[str, str]]:
    names = _tokenizer_file_keys(tokenizer.library)
    return [(f"{key}.{name}", getattr(tokenizer, name)) for name in names if getattr(tokenizer, name)]


@dataclasses.dataclass(frozen=True)
class TrainingConfig(TextPretrainingConfig):
    trainer: GptTrainerSection
    exp_manager: GptExpManagerSection
    model: ModelSection

    def check(self, key: str) -> None:
        super().check(key)
        model, trainer, params = self.model, self.trainer, self.exp_manager.checkpoint_callback_params
        check_gpu_settings(model, trainer, f"{key}.model")
        check_experts_on_cpu(model, trainer.accelerator, f"{key}.model")
        check_profile_ranks(model.nsys_profile, trainer.num_nodes * trainer.devices, f"{key}.model.nsys_profile")
        model_parallel = model.tensor_model_parallel_size * model.pipeline_model_parallel_size
        if params.model_parallel_size not in (None, model_parallel):
            raise config_fault(
                f"{key}.exp_manager.checkpoint_callback_params.model_parallel_size",
                params.model_parallel_size,
                f"must equal TP({model.tensor_model_parallel_size}) x PP({model.pipeline_model_parallel_size}) "
                f"= {model_parallel}, or be null",
            )
        if params.monitor == "val_loss" and (
            trainer.limit_val_batches == 0 or trainer.val_check_interval > trainer.max_steps
        ):
            raise config_fault(
                f"{key}.exp_manager.checkpoint_callback_params.monitor",
                "val_loss",
                "needs validation (trainer.limit_val_batches > 0, val_check_interval <= max_steps); use monitor: step",
            )

    def reads(self) -> list[tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: tokenizer files, data, a checkpoint to start from."""
        files = tokenizer_files(self.model.tokenizer, f"{STAGE}.model.tokenizer") + data_reads(
            self.run, self.model.data, STAGE
        )
        if self.model.resume_from_checkpoint:
            files.append((f"{STAGE}.model.resume_from_checkpoint", self.model.resume_from_checkpoint))
        if self.model.restore_from_path:
            files.append((f"{STAGE}.model.restore_from_path", self.model.restore_from_path))
        return files
