"""Schema of the resolved `training` section the GPT trainer reads (conf/_family/gpt3_training.yaml).

    cfg = TrainingConfig.from_dict(load_resolved_config(path))

Every key the family config holds is declared here with its unit; `bind` rejects any other key under
trainer/exp_manager/model (a typo fails at once, naming the full key). `run.*` belongs mostly to the
launcher, so unknown `run` keys are let through. Checks that need the world size (TP x PP x DP,
batch divisibility) live in `TrainingConfig.check_layout`, called once the process group exists.
"""
import dataclasses
import re
from typing import Any, Dict, List, Literal, Optional, Union

from ..common.config import JobConfigError, bind

Activation = Literal["gelu", "fast-swiglu", "squared-relu"]
Normalization = Literal["layernorm", "layernorm1p", "rmsnorm"]


def _positive(key: str, value: int) -> None:
    if value <= 0:
        raise JobConfigError(f"{key}: must be > 0, got {value}")


def _non_negative(key: str, value: Union[int, float]) -> None:
    if value < 0:
        raise JobConfigError(f"{key}: must be >= 0, got {value}")


@dataclasses.dataclass(frozen=True)
class RunSection:
    name: str  # the run's name; prefixes nothing on the job side, shown in the first log line
    preprocessed_dir: Optional[str] = None  # folder of .bin/.idx files blended when model.data.data_prefix is null
    blending_alpha: float = 1.0  # weight of a file = size ** alpha (1.0 by size, 0.0 equal)


@dataclasses.dataclass(frozen=True)
class TrainerSection:
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]  # gpu: NCCL + CUDA; cpu: gloo + the megatron-core CPU shim
    precision: Union[int, str]  # bf16 (bf16-mixed), 16 (16-mixed, dynamic loss scaling) or 32
    max_steps: int  # optimizer steps of the whole run (a resumed run continues towards it)
    max_time: Optional[str]  # "DD:HH:MM:SS" of wall time per process start; then save and exit 0. null = no limit
    log_every_n_steps: int  # steps between progress lines and TensorBoard points
    val_check_interval: int  # steps between validations
    limit_val_batches: int  # global batches per validation; 0 disables validation
    limit_test_batches: int  # global batches of the test split evaluated after the last step; 0 skips it
    accumulate_grad_batches: int = 1  # must be 1: accumulation comes from global_batch_size / micro_batch_size
    gradient_clip_val: Optional[float] = None  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        for name in ("num_nodes", "devices", "max_steps", "log_every_n_steps", "val_check_interval"):
            _positive(f"{key}.{name}", getattr(self, name))
        for name in ("limit_val_batches", "limit_test_batches"):
            _non_negative(f"{key}.{name}", getattr(self, name))
        if self.accumulate_grad_batches != 1:
            raise JobConfigError(f"{key}.accumulate_grad_batches: must be 1, got {self.accumulate_grad_batches}; "
                                 "gradient accumulation follows from model.global_batch_size / micro_batch_size")
        if self.gradient_clip_val is not None:
            _non_negative(f"{key}.gradient_clip_val", self.gradient_clip_val)
        if self.accelerator == "cpu" and self.precision_name(key) != "fp32":
            raise JobConfigError(f"{key}.precision: {self.precision} needs accelerator gpu (megatron-core's mixed-precision "
                                 "optimizer only wraps CUDA tensors); use 32 on the CPU")
        self.max_time_seconds(key)

    def precision_name(self, key: str = "trainer") -> str:
        """'bf16', 'fp16' or 'fp32'."""
        names = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16", "32": "fp32", "32-true": "fp32"}
        name = names.get(str(self.precision))
        if name is None:
            raise JobConfigError(f"{key}.precision: {self.precision!r} is not one of bf16, 16, 32 (or bf16-mixed, 16-mixed, 32-true)")
        return name

    def max_time_seconds(self, key: str = "trainer") -> Optional[float]:
        if self.max_time is None:
            return None
        match = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", str(self.max_time).strip())
        if not match:
            raise JobConfigError(f"{key}.max_time: {self.max_time!r} is not DD:HH:MM:SS, e.g. \"00:23:30:00\"")
        days, hours, minutes, seconds = (int(g) for g in match.groups())
        if hours > 23 or minutes > 59 or seconds > 59:
            raise JobConfigError(f"{key}.max_time: {self.max_time!r} has hours > 23, minutes > 59 or seconds > 59")
        return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


@dataclasses.dataclass(frozen=True)
class CheckpointParams:
    every_n_train_steps: int  # steps between checkpoints; also saved at the end, at max_time and on SIGTERM/SIGUSR1
    save_top_k: int  # newest N complete checkpoints are kept; -1 keeps all

    def check(self, key: str) -> None:
        _positive(f"{key}.every_n_train_steps", self.every_n_train_steps)
        if self.save_top_k == 0 or self.save_top_k < -1:
            raise JobConfigError(f"{key}.save_top_k: must be >= 1 or -1 (keep all), got {self.save_top_k}; "
                                 "to save nothing set exp_manager.create_checkpoint_callback: false")


@dataclasses.dataclass(frozen=True)
class ExpManagerSection:
    explicit_log_dir: str  # TensorBoard events here, checkpoints in <explicit_log_dir>/checkpoints/step-<N>
    checkpoint_callback_params: CheckpointParams
    create_tensorboard_logger: bool = True
    create_wandb_logger: bool = False  # needs the wandb package and a prior `wandb login`
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


@dataclasses.dataclass(frozen=True)
class SchedSection:
    name: Literal["CosineAnnealing"]
    warmup_steps: int = 0  # linear warm-up from lr / (warmup_steps + 1) to lr
    constant_steps: int = 0  # steps held at min_lr at the end of the run
    min_lr: float = 0.0  # floor of the cosine decay

    def check(self, key: str) -> None:
        _non_negative(f"{key}.warmup_steps", self.warmup_steps)
        _non_negative(f"{key}.constant_steps", self.constant_steps)
        _non_negative(f"{key}.min_lr", self.min_lr)


@dataclasses.dataclass(frozen=True)
class OptimSection:
    name: Literal["distributed_fused_adam", "fused_adam", "adamw"]  # all Adam with decoupled weight decay
    lr: float  # peak learning rate
    sched: SchedSection
    weight_decay: float = 0.0  # not applied to biases and norm weights
    betas: List[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])

    def check(self, key: str) -> None:
        _positive(f"{key}.lr", self.lr)
        _non_negative(f"{key}.weight_decay", self.weight_decay)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise JobConfigError(f"{key}.betas: expected [beta1, beta2] in [0, 1), got {self.betas}")
        if self.sched.min_lr > self.lr:
            raise JobConfigError(f"{key}.sched.min_lr: {self.sched.min_lr} is above optim.lr {self.lr}")


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
        _positive(f"{key}.seq_length", self.seq_length)
        _non_negative(f"{key}.num_workers", self.num_workers)
        parts = self.splits_string.replace("/", ",").split(",")
        try:
            weights = [float(p) for p in parts]
        except ValueError:
            raise JobConfigError(f"{key}.splits_string: {self.splits_string!r} is not 'train,validation,test' numbers") from None
        if len(weights) > 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise JobConfigError(f"{key}.splits_string: {self.splits_string!r} needs up to 3 non-negative weights, not all 0")
        if self.data_prefix is not None:
            self.blend(key)

    def blend(self, key: str = "model.data") -> List[Union[float, str]]:
        prefix = self.data_prefix
        pairs_ok = len(prefix) >= 2 and len(prefix) % 2 == 0 and all(
            isinstance(w, float) or (isinstance(w, int) and not isinstance(w, bool)) for w in prefix[0::2]
        ) and all(isinstance(p, str) for p in prefix[1::2])
        if len(prefix) == 1 and isinstance(prefix[0], str):
            return [1.0, prefix[0]]
        if not pairs_ok or any(w < 0 for w in prefix[0::2]) or sum(prefix[0::2]) <= 0:
            raise JobConfigError(f"{key}.data_prefix: expected [weight, prefix, weight, prefix, ...] with weights >= 0, got {prefix}")
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
        for name in ("micro_batch_size", "global_batch_size", "num_layers", "hidden_size", "ffn_hidden_size",
                     "num_attention_heads", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "encoder_seq_length", "max_position_embeddings", "make_vocab_size_divisible_by",
                     "fp8_interval", "fp8_amax_history_len"):
            _positive(f"{key}.{name}", getattr(self, name))
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise JobConfigError(f"{key}.{name}: must be in [0, 1), got {value}")
        if self.data.seq_length != self.encoder_seq_length:
            raise JobConfigError(f"{key}.data.seq_length: {self.data.seq_length} differs from "
                                 f"{key}.encoder_seq_length {self.encoder_seq_length}; they must be equal")
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings < self.encoder_seq_length:
            raise JobConfigError(f"{key}.max_position_embeddings: {self.max_position_embeddings} is below "
                                 f"encoder_seq_length {self.encoder_seq_length}")
        if not 0.0 < self.rotary_percentage <= 1.0:
            raise JobConfigError(f"{key}.rotary_percentage: must be in (0, 1], got {self.rotary_percentage}")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise JobConfigError(f"{key}.hidden_size: {self.hidden_size} is not divisible by num_attention_heads "
                                 f"{self.num_attention_heads}; set kv_channels")
        if self.num_query_groups is not None and (self.num_query_groups <= 0 or self.num_attention_heads % self.num_query_groups):
            raise JobConfigError(f"{key}.num_query_groups: {self.num_query_groups} must divide num_attention_heads {self.num_attention_heads}")
        if self.virtual_pipeline_model_parallel_size is not None:
            _positive(f"{key}.virtual_pipeline_model_parallel_size", self.virtual_pipeline_model_parallel_size)
        if self.num_layers % (self.pipeline_model_parallel_size * (self.virtual_pipeline_model_parallel_size or 1)):
            raise JobConfigError(f"{key}.num_layers: {self.num_layers} is not divisible by PP({self.pipeline_model_parallel_size}) "
                                 f"x virtual PP({self.virtual_pipeline_model_parallel_size or 1})")
        if self.overlap_p2p_comm and not (self.virtual_pipeline_model_parallel_size or 1) > 1:
            raise JobConfigError(f"{key}.overlap_p2p_comm: only works with the interleaved schedule "
                                 "(virtual_pipeline_model_parallel_size > 1); set it to false")
        if self.activations_checkpoint_granularity == "full":
            if self.activations_checkpoint_method is None or not self.activations_checkpoint_num_layers:
                raise JobConfigError(f"{key}.activations_checkpoint_granularity: full recompute needs "
                                     "activations_checkpoint_method (uniform or block) and activations_checkpoint_num_layers >= 1")
        if self.fp8 and not (self.fp8_e4m3 or self.fp8_hybrid):
            raise JobConfigError(f"{key}.fp8: true needs a format: fp8_e4m3 (e4m3 everywhere) or fp8_hybrid "
                                 "(e4m3 forward, e5m2 gradients)")
        if self.rampup_batch_size is not None:
            if len(self.rampup_batch_size) != 3 or any(v <= 0 for v in self.rampup_batch_size):
                raise JobConfigError(f"{key}.rampup_batch_size: use [start, increment, ramp-up samples] of positive "
                                     f"integers, got {self.rampup_batch_size}")
            start, increment, _ = self.rampup_batch_size
            if start > self.global_batch_size or (self.global_batch_size - start) % increment:
                raise JobConfigError(f"{key}.rampup_batch_size: global_batch_size({self.global_batch_size}) must be "
                                     f"start({start}) + k x increment({increment})")


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    run: RunSection
    trainer: TrainerSection
    exp_manager: ExpManagerSection
    model: ModelSection

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TrainingConfig":
        unknown = sorted(set(data) - {"run", "trainer", "exp_manager", "model"})
        if unknown:
            raise JobConfigError(f"{unknown[0]}: unknown section; a training config holds run, trainer, exp_manager, model")
        for section in ("run", "trainer", "exp_manager", "model"):
            if section not in data:
                raise JobConfigError(f"{section}: missing section")
        return cls(
            run=bind(RunSection, data["run"], "run", strict=False),
            trainer=bind(TrainerSection, data["trainer"], "trainer"),
            exp_manager=bind(ExpManagerSection, data["exp_manager"], "exp_manager"),
            model=bind(ModelSection, data["model"], "model"),
        )

    def data_parallel_size(self, world_size: int) -> int:
        """Checks the layout against the processes actually started, showing every factor."""
        m, t = self.model, self.trainer
        if world_size != t.num_nodes * t.devices:
            raise JobConfigError(f"trainer.num_nodes({t.num_nodes}) x trainer.devices({t.devices}) = {t.num_nodes * t.devices} "
                                 f"but {world_size} processes were started")
        tp, pp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size
        if world_size % (tp * pp):
            raise JobConfigError(f"model.tensor_model_parallel_size: TP({tp}) x PP({pp}) = {tp * pp} does not divide "
                                 f"the world size {world_size}")
        dp = world_size // (tp * pp)
        step = m.micro_batch_size * dp
        if m.global_batch_size % step:
            raise JobConfigError(f"model.global_batch_size: {m.global_batch_size} is not a multiple of micro_batch_size"
                                 f"({m.micro_batch_size}) x data-parallel size({dp}) = {step}")
        if m.rampup_batch_size is not None:
            start, increment, _ = m.rampup_batch_size
            if start % step or increment % step:
                raise JobConfigError(f"model.rampup_batch_size: start({start}) and increment({increment}) must be multiples "
                                     f"of micro_batch_size({m.micro_batch_size}) x data-parallel size({dp}) = {step}")
        heads, groups = m.num_attention_heads, m.num_query_groups or m.num_attention_heads
        if heads % tp or groups % tp:
            raise JobConfigError(f"model.tensor_model_parallel_size: TP({tp}) must divide num_attention_heads({heads}) "
                                 f"and num_query_groups({groups})")
        if m.ffn_hidden_size % tp:
            raise JobConfigError(f"model.ffn_hidden_size: {m.ffn_hidden_size} is not divisible by TP({tp})")
        vpp = m.virtual_pipeline_model_parallel_size or 1
        if vpp > 1:
            if pp < 2:
                raise JobConfigError("model.virtual_pipeline_model_parallel_size: needs pipeline_model_parallel_size > 1")
            # megatron-core's interleaved schedule runs microbatches in groups of PP.
            for gbs in _batch_sizes(m):
                if (gbs // step) % pp:
                    raise JobConfigError(f"model.global_batch_size: with the interleaved schedule the number of "
                                         f"microbatches ({gbs} / {step} = {gbs // step}) must be a multiple of PP({pp})")
        return dp


def _batch_sizes(model: ModelSection) -> List[int]:
    if model.rampup_batch_size is None:
        return [model.global_batch_size]
    start, increment, _ = model.rampup_batch_size
    return list(range(start, model.global_batch_size + 1, increment))
