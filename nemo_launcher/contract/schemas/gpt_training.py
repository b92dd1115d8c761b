"""Schema of the resolved `training` section of the GPT family (conf/_family/gpt3_training.yaml).

    cfg = TrainingConfig.from_dict(section)        # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

Every key the family config holds is declared here with its unit; `bind` refuses any other key. The layout
rules (TP x PP dividing the GPUs, heads and layers divisible, the global batch splitting over data-parallel
ranks, ramp-up steps) are checked against trainer.num_nodes x trainer.devices at bind time, so the launcher
refuses what Megatron would refuse hours later in the queue.
"""
import dataclasses
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from ..binding import bind_stage, config_fault, fraction, non_negative, non_negative_fields, positive, positive_fields
from ..durations import WallClock
from .run import RunBase

STAGE = "training"
Activation = Literal["gelu", "fast-swiglu", "squared-relu"]
Normalization = Literal["layernorm", "layernorm1p", "rmsnorm"]
# What trainer.precision may say, and what each means.
PRECISIONS = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16", "32": "fp32", "32-true": "fp32"}
Precision = Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32]


def precision_name(precision) -> str:
    """'bf16', 'fp16' or 'fp32' for a trainer.precision value."""
    return PRECISIONS[str(precision)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSection(RunBase):
    # Slurm: when the trainer stops before max_steps (time limit, max_time), it saves and the job requeues itself.
    auto_requeue: bool = True
    preprocessed_dir: Optional[str] = None  # folder of .bin/.idx files blended when model.data.data_prefix is null
    blending_alpha: float = 1.0  # weight of a file = size ** alpha (1.0 by size, 0.0 equal)


@dataclasses.dataclass(frozen=True)
class TrainerSection:
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]  # gpu: NCCL + CUDA; cpu: gloo + the megatron-core CPU shim
    precision: Precision  # bf16 (bf16-mixed), 16 (16-mixed, dynamic loss scaling) or 32
    max_steps: int  # optimizer steps of the whole run (a resumed run continues towards it)
    max_time: Optional[WallClock]  # "DD:HH:MM:SS" of wall time per process start; then save and exit 0. null = no limit
    log_every_n_steps: int  # steps between progress lines and TensorBoard points
    val_check_interval: int  # steps between validations
    limit_val_batches: int  # global batches per validation; 0 disables validation
    limit_test_batches: int  # global batches of the test split evaluated after the last step; 0 skips it
    accumulate_grad_batches: int = 1  # must be 1: accumulation comes from global_batch_size / micro_batch_size
    gradient_clip_val: Optional[float] = None  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices", "max_steps", "log_every_n_steps", "val_check_interval")
        non_negative_fields(self, key, "limit_val_batches", "limit_test_batches")
        if self.accumulate_grad_batches != 1:
            raise config_fault(f"{key}.accumulate_grad_batches", self.accumulate_grad_batches,
                               "must be 1: gradient accumulation follows from model.global_batch_size / micro_batch_size")
        if self.gradient_clip_val is not None:
            non_negative(f"{key}.gradient_clip_val", self.gradient_clip_val)
        if self.accelerator == "cpu" and self.precision_name() != "fp32":
            raise config_fault(f"{key}.precision", self.precision,
                               "needs accelerator gpu (megatron-core's mixed-precision optimizer only wraps CUDA tensors); use 32 on the CPU")

    def precision_name(self) -> str:
        return precision_name(self.precision)

    def max_time_seconds(self) -> Optional[float]:
        return None if self.max_time is None else float(self.max_time.seconds)


@dataclasses.dataclass(frozen=True)
class CheckpointParams:
    every_n_train_steps: int  # steps between checkpoints; also saved at the end, at max_time and on SIGTERM/SIGUSR1
    save_top_k: int  # newest N complete checkpoints are kept; -1 keeps all

    def check(self, key: str) -> None:
        positive(f"{key}.every_n_train_steps", self.every_n_train_steps)
        if self.save_top_k == 0 or self.save_top_k < -1:
            raise config_fault(f"{key}.save_top_k", self.save_top_k,
                               "must be >= 1 or -1 (keep all); to save nothing set exp_manager.create_checkpoint_callback: false")


@dataclasses.dataclass(frozen=True)
class ExpManagerSection:
    explicit_log_dir: str  # TensorBoard events here, checkpoints in <explicit_log_dir>/checkpoints/step-<N>
    checkpoint_callback_params: CheckpointParams
    create_tensorboard_logger: bool = True
    create_wandb_logger: bool = False  # needs the wandb package and wandb_api_key_file (or a prior `wandb login`)
    wandb_logger_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)  # passed to WandbLogger (project, name, ...)
    resume_if_exists: bool = True  # continue from the newest complete checkpoint in explicit_log_dir
    resume_ignore_no_checkpoint: bool = True  # false: resume_if_exists with no checkpoint is an error
    create_checkpoint_callback: bool = True  # false: never save (signals and max_time then just stop)
    log_step_timing: bool = True  # log train_step_timing (seconds per step)


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    library: Literal["megatron", "sentencepiece", "huggingface"]
    type: Optional[str] = None  # library megatron: GPT2BPETokenizer
    model: Optional[str] = None  # sentencepiece .model or huggingface tokenizer.json
    vocab_file: Optional[str] = None  # library megatron: GPT-2 vocab.json
    merge_file: Optional[str] = None  # library megatron: GPT-2 merges.txt

    def check(self, key: str) -> None:
        needed = {"megatron": ("vocab_file", "merge_file"), "sentencepiece": ("model",), "huggingface": ("model",)}[self.library]
        for name in needed:
            if not getattr(self, name):
                raise config_fault(f"{key}.{name}", getattr(self, name), f"tokenizer library {self.library} needs this file")


@dataclasses.dataclass(frozen=True)
class SchedSection:
    name: Literal["CosineAnnealing"]
    warmup_steps: int = 0  # linear warm-up from lr / (warmup_steps + 1) to lr
    constant_steps: int = 0  # steps held at min_lr at the end of the run
    min_lr: float = 0.0  # floor of the cosine decay

    def check(self, key: str) -> None:
        non_negative_fields(self, key, "warmup_steps", "constant_steps", "min_lr")


@dataclasses.dataclass(frozen=True)
class OptimSection:
    name: Literal["distributed_fused_adam", "fused_adam", "adamw"]  # all Adam with decoupled weight decay
    lr: float  # peak learning rate
    sched: SchedSection
    weight_decay: float = 0.0  # not applied to biases and norm weights
    betas: List[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])

    def check(self, key: str) -> None:
        positive(f"{key}.lr", self.lr)
        non_negative(f"{key}.weight_decay", self.weight_decay)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise config_fault(f"{key}.betas", self.betas, "expected [beta1, beta2], each in [0, 1)")
        if self.sched.min_lr > self.lr:
            raise config_fault(f"{key}.sched.min_lr", self.sched.min_lr, f"is above optim.lr ({self.lr}); lower it")


@dataclasses.dataclass(frozen=True)
class DataSection:
    seq_length: int  # tokens per sample; must equal model.encoder_seq_length
    splits_string: str = "99990,8,2"  # train,validation,test weights of each file's documents
    num_workers: int = 2  # DataLoader worker processes per rank
    dataloader_type: Literal["single", "cyclic"] = "single"  # single: dataset order; cyclic: reshuffled each pass
    reset_position_ids: bool = False  # positions restart after each end-of-document token
    reset_attention_mask: bool = False  # tokens attend only within their document (local layer spec only)
    eod_mask_loss: bool = False  # no loss on end-of-document tokens
    index_mapping_dir: Optional[str] = None  # megatron-core's index cache; null = beside each data file
    data_prefix: Optional[List[Union[float, str]]] = None  # [weight, prefix, ...]; null = automatic blend

    def check(self, key: str) -> None:
        positive(f"{key}.seq_length", self.seq_length)
        non_negative(f"{key}.num_workers", self.num_workers)
        parts = self.splits_string.replace("/", ",").split(",")
        try:
            weights = [float(p) for p in parts]
        except ValueError:
            raise config_fault(f"{key}.splits_string", self.splits_string, "use 'train,validation,test' weights, e.g. '99990,8,2'") from None
        if len(weights) > 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise config_fault(f"{key}.splits_string", self.splits_string, "needs up to 3 weights >= 0, not all 0")
        if self.data_prefix is not None:
            self.blend(key)

    def blend(self, key: str = "training.model.data") -> List[Union[float, str]]:
        prefix = self.data_prefix
        if len(prefix) == 1 and isinstance(prefix[0], str):
            return [1.0, prefix[0]]
        pairs_ok = len(prefix) >= 2 and len(prefix) % 2 == 0 and all(
            isinstance(w, float) or (isinstance(w, int) and not isinstance(w, bool)) for w in prefix[0::2]
        ) and all(isinstance(p, str) for p in prefix[1::2])
        if not pairs_ok or any(w < 0 for w in prefix[0::2]) or sum(prefix[0::2]) <= 0:
            raise config_fault(f"{key}.data_prefix", prefix, "expected [weight, prefix, weight, prefix, ...] with weights >= 0")
        return list(prefix)


@dataclasses.dataclass(frozen=True)
class ModelSection:
    micro_batch_size: int  # samples per forward pass per data-parallel rank
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    tokenizer: TokenizerSection
    optim: OptimSection
    data: DataSection
    rampup_batch_size: Optional[List[int]] = None  # [start, increment, ramp-up samples]
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None  # model chunks per pipeline stage (interleaved 1F1B)
    encoder_seq_length: int = 2048  # tokens per sample
    max_position_embeddings: int = 2048  # rows of the learned position table
    num_query_groups: Optional[int] = None  # grouped-query attention; null = one group per head
    init_method_std: float = 0.02
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    kv_channels: Optional[int] = None  # per-head size; null = hidden_size / num_attention_heads
    normalization: Normalization = "layernorm"  # layernorm1p = LayerNorm with zero-centred gamma
    layernorm_epsilon: float = 1.0e-5
    make_vocab_size_divisible_by: int = 128  # vocab padded to a multiple of this x TP
    bias: bool = True  # bias terms in the linear layers
    activation: Activation = "gelu"
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"
    rotary_percentage: float = 1.0  # share of each head's channels rotated (rope only)
    share_embeddings_and_output_weights: bool = True
    seed: int = 1234
    use_cpu_initialization: bool = False  # init weights on the CPU: identical values for any TP size
    sequence_parallel: bool = False  # needs TP > 1 and Transformer Engine norms
    activations_checkpoint_granularity: Optional[Literal["selective", "full"]] = None
    activations_checkpoint_method: Optional[Literal["uniform", "block"]] = None  # full recompute only
    activations_checkpoint_num_layers: Optional[int] = None  # full recompute only
    overlap_p2p_comm: bool = False  # overlap pipeline sends with compute; interleaved schedule only
    transformer_engine: bool = True  # TE layer spec when transformer_engine is importable
    fp8: bool = False  # FP8 GEMMs through Transformer Engine (Hopper)
    fp8_e4m3: bool = False  # e4m3 for every FP8 tensor; takes precedence over fp8_hybrid
    fp8_hybrid: bool = True  # e4m3 forward, e5m2 gradients (the usual recipe)
    fp8_margin: int = 0
    fp8_interval: int = 1
    fp8_amax_history_len: int = 1024
    fp8_amax_compute_algo: Literal["max", "most_recent"] = "max"

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size", "global_batch_size", "num_layers", "hidden_size", "ffn_hidden_size",
                        "num_attention_heads", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                        "encoder_seq_length", "max_position_embeddings", "make_vocab_size_divisible_by",
                        "fp8_interval", "fp8_amax_history_len")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)
        if self.data.seq_length != self.encoder_seq_length:
            raise config_fault(f"{key}.data.seq_length", self.data.seq_length,
                               f"must equal {key}.encoder_seq_length ({self.encoder_seq_length})")
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings < self.encoder_seq_length:
            raise config_fault(f"{key}.max_position_embeddings", self.max_position_embeddings,
                               f"is below encoder_seq_length ({self.encoder_seq_length}): learned positions need one row per token")
        if not 0.0 < self.rotary_percentage <= 1.0:
            raise config_fault(f"{key}.rotary_percentage", self.rotary_percentage, "must be in (0, 1]")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise config_fault(f"{key}.hidden_size", self.hidden_size,
                               f"is not divisible by num_attention_heads ({self.num_attention_heads}); set kv_channels")
        if self.kv_channels is not None:
            positive(f"{key}.kv_channels", self.kv_channels)
        if self.num_query_groups is not None:
            positive(f"{key}.num_query_groups", self.num_query_groups)
            if self.num_attention_heads % self.num_query_groups:
                raise config_fault(f"{key}.num_query_groups", self.num_query_groups,
                                   f"must divide num_attention_heads ({self.num_attention_heads})")
        vpp = self.virtual_pipeline_model_parallel_size
        if vpp is not None:
            positive(f"{key}.virtual_pipeline_model_parallel_size", vpp)
        pp = self.pipeline_model_parallel_size
        if self.num_layers % (pp * (vpp or 1)):
            raise config_fault(f"{key}.num_layers", self.num_layers,
                               f"must be divisible by PP({pp}) x virtual PP({vpp or 1}) = {pp * (vpp or 1)}; "
                               "change num_layers or the pipeline sizes")
        if (vpp or 1) > 1 and pp < 2:
            raise config_fault(f"{key}.virtual_pipeline_model_parallel_size", vpp, "needs pipeline_model_parallel_size > 1")
        if self.overlap_p2p_comm and not (vpp or 1) > 1:
            raise config_fault(f"{key}.overlap_p2p_comm", True,
                               "only works with the interleaved schedule (virtual_pipeline_model_parallel_size > 1); set false")
        if self.activations_checkpoint_granularity == "full":
            if self.activations_checkpoint_method is None or not self.activations_checkpoint_num_layers:
                raise config_fault(f"{key}.activations_checkpoint_granularity", "full",
                                   "full recompute needs activations_checkpoint_method (uniform or block) and "
                                   "activations_checkpoint_num_layers >= 1")
        if self.fp8 and not (self.fp8_e4m3 or self.fp8_hybrid):
            raise config_fault(f"{key}.fp8", True, "needs a format: fp8_e4m3 (e4m3 everywhere) or fp8_hybrid (e4m3 forward, e5m2 gradients)")
        if self.rampup_batch_size is not None:
            ramp = self.rampup_batch_size
            if len(ramp) != 3 or any(v <= 0 for v in ramp):
                raise config_fault(f"{key}.rampup_batch_size", ramp, "use [start, increment, ramp-up samples], e.g. [256, 128, 50000000]")
            start, increment, _ = ramp
            if start > self.global_batch_size or (self.global_batch_size - start) % increment:
                raise config_fault(f"{key}.rampup_batch_size", ramp,
                                   f"global_batch_size({self.global_batch_size}) must be start({start}) + k x increment({increment})")

    def batch_sizes(self) -> List[int]:
        """Every global batch size the run uses: the ramp-up's steps, then global_batch_size."""
        if self.rampup_batch_size is None:
            return [self.global_batch_size]
        start, increment, _ = self.rampup_batch_size
        return list(range(start, self.global_batch_size + 1, increment))


def tokenizer_files(tokenizer: TokenizerSection, key: str) -> List[Tuple[str, str]]:
    names = ("vocab_file", "merge_file") if tokenizer.library == "megatron" else ("model",)
    return [(f"{key}.{name}", getattr(tokenizer, name)) for name in names if getattr(tokenizer, name)]


def check_layout(model: ModelSection, nodes: int, devices: int, key: str) -> int:
    """The process-layout rules of a GPT model on nodes x devices processes, each factor shown; returns DP.

    Shared by pretraining and fine-tuning (whose model section has fewer keys: the architecture comes from a
    .nemo there, so absent attributes are skipped).
    """
    m = f"{key}.model"
    tp, pp = model.tensor_model_parallel_size, model.pipeline_model_parallel_size
    world = nodes * devices
    if world % (tp * pp):
        raise config_fault(f"{m}.tensor_model_parallel_size", tp,
                           f"TP({tp}) x PP({pp}) = {tp * pp} does not divide nodes({nodes}) x devices({devices}) = {world}; "
                           "change the parallel sizes or trainer.num_nodes/trainer.devices")
    dp = world // (tp * pp)
    heads = getattr(model, "num_attention_heads", None)
    if heads is not None:
        if heads % tp:
            raise config_fault(f"{m}.num_attention_heads", heads, f"must be divisible by TP({tp}); pick a TP that divides {heads}")
        groups = model.num_query_groups or heads
        if groups % tp:
            raise config_fault(f"{m}.num_query_groups", groups, f"must be divisible by TP({tp})")
        if model.ffn_hidden_size % tp:
            raise config_fault(f"{m}.ffn_hidden_size", model.ffn_hidden_size, f"must be divisible by TP({tp})")
    step = model.micro_batch_size * dp
    if model.global_batch_size % step:
        raise config_fault(f"{m}.global_batch_size", model.global_batch_size,
                           f"must be a multiple of micro_batch_size({model.micro_batch_size}) x data-parallel size({dp}) = {step}, "
                           f"where data-parallel size = nodes({nodes}) x devices({devices}) / (TP({tp}) x PP({pp}))")
    ramp = getattr(model, "rampup_batch_size", None)
    if ramp is not None:
        start, increment, _ = ramp
        if start % step or increment % step:
            raise config_fault(f"{m}.rampup_batch_size", ramp,
                               f"start and increment must be multiples of micro_batch_size x data-parallel size = {step}")
    vpp = getattr(model, "virtual_pipeline_model_parallel_size", None) or 1
    if vpp > 1:
        # megatron-core's interleaved schedule runs microbatches in groups of PP.
        for gbs in model.batch_sizes():
            if (gbs // step) % pp:
                raise config_fault(f"{m}.global_batch_size", gbs,
                                   f"with the interleaved schedule the number of microbatches ({gbs} / {step} = {gbs // step}) "
                                   f"must be a multiple of PP({pp})")
    return dp


def check_world_size(trainer, world_size: int, key: str) -> None:
    """The processes actually started must be the ones the config asked for (the job's own check)."""
    expected = trainer.num_nodes * trainer.devices
    if world_size != expected:
        raise config_fault(f"{key}.trainer.devices", trainer.devices,
                           f"trainer.num_nodes({trainer.num_nodes}) x trainer.devices({trainer.devices}) = {expected}, "
                           f"but {world_size} processes were started; start one process per device")


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    run: RunSection
    trainer: TrainerSection
    exp_manager: ExpManagerSection
    model: ModelSection

    def check(self, key: str) -> None:
        if self.model.data.data_prefix is None and not self.run.preprocessed_dir:
            raise config_fault(f"{key}.run.preprocessed_dir", None,
                               "model.data.data_prefix is null, so the data is every .bin/.idx pair in run.preprocessed_dir: set one of them")
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)

    def reads(self) -> List[Tuple[str, str]]:
        """(key, path or glob) of the files the trainer opens: tokenizer files and data."""
        paths = tokenizer_files(self.model.tokenizer, f"{STAGE}.model.tokenizer")
        data = self.model.data
        if data.data_prefix is None:
            paths.append((f"{STAGE}.run.preprocessed_dir", f"{self.run.preprocessed_dir}/*.idx"))
        else:
            for prefix in data.blend()[1::2]:
                paths += [(f"{STAGE}.model.data.data_prefix", f"{prefix}{suffix}") for suffix in (".bin", ".idx")]
        return paths

    def writes(self) -> List[str]:
        return [self.exp_manager.explicit_log_dir]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "TrainingConfig":
        return bind_stage(cls, data, stage)

    def data_parallel_size(self, world_size: int) -> int:
        """Checks the layout against the processes actually started; returns DP."""
        check_world_size(self.trainer, world_size, STAGE)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, STAGE)
