"""Sections and rules every pretraining schema shares (gpt_training, t5_training, bert_training).

The `run`, `trainer` and `exp_manager` sections are the same for every family, and so are the optimizer, the
data blend and the process-layout arithmetic: a family schema imports them and adds its own `model` section.
Megatron's masked-LM datasets (T5's span corruption, BERT's masked tokens) share the masking keys of
`MaskedLmData`.
"""

import dataclasses
from typing import Any, Literal

from ..binding import (
    StageSchema,
    config_fault,
    field_fault,
    fraction,
    must_be_one,
    non_negative,
    non_negative_fields,
    positive,
    positive_fields,
)
from ..checkpoint_damage import AllCheckpointsDamaged
from ..durations import WallClock
from .moe import check_expert_layout
from .run import RunBase

# What trainer.precision may say, and what each means.
PRECISIONS = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16", "32": "fp32", "32-true": "fp32"}
Precision = Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32]


def precision_name(precision) -> str:
    """'bf16', 'fp16' or 'fp32' for a trainer.precision value."""
    return PRECISIONS[str(precision)]


class TrainerClock:
    """What every trainer section answers alike (mixed into its dataclass): its precision's name, and max_time in
    seconds (None: no limit)."""

    def precision_name(self) -> str:
        return precision_name(self.precision)

    def max_time_seconds(self) -> float | None:
        return None if self.max_time is None else float(self.max_time.seconds)


class StoredPrecision:
    """Mixed into a model section whose `precision` may be null, meaning the precision the .nemo was saved in."""

    def precision_name(self) -> str | None:
        return None if self.precision is None else precision_name(self.precision)


def check_model_copies(run, tp: int, key: str) -> int:
    """An evaluation job's nodes x ntasks_per_node processes hold whole TP groups; returns how many processes."""
    processes = run.nodes * run.ntasks_per_node
    if processes % tp:
        raise config_fault(
            f"{key}.run.ntasks_per_node",
            run.ntasks_per_node,
            f"nodes({run.nodes}) x ntasks_per_node({run.ntasks_per_node}) = {processes} processes "
            f"cannot hold TP({tp}) ranks evenly; make it a multiple",
        )
    return processes


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSection(RunBase):
    # Slurm: when the trainer stops before max_steps (time limit, max_time), it saves and the job requeues itself.
    auto_requeue: bool = True
    preprocessed_dir: str | None = None  # folder of .bin/.idx files blended when model.data.data_prefix is null
    blending_alpha: float = 1.0  # weight of a file = size ** alpha (1.0 by size, 0.0 equal)
    # Exported in the training job on top of the global env_vars (nulls skipped), e.g. Transformer Engine's
    # NVTE_* settings; gpu_training.training_environment adds what the model's settings require.
    env_vars: dict[str, Any] = dataclasses.field(default_factory=dict)

    def check(self, key: str) -> None:
        super().check(key)
        from .gpu_training import check_env_names

        check_env_names(self.env_vars, f"{key}.env_vars")


@dataclasses.dataclass(frozen=True)
class TrainerSection(TrainerClock):
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]  # gpu: NCCL + CUDA; cpu: gloo + the megatron-core CPU shim
    precision: Precision  # bf16 (bf16-mixed), 16 (16-mixed, dynamic loss scaling) or 32
    max_steps: int  # optimizer steps of the whole run (a resumed run continues towards it)
    max_time: WallClock | None  # "DD:HH:MM:SS" of wall time per process start; then save and exit 0. null = no limit
    log_every_n_steps: int  # steps between progress lines and TensorBoard points
    val_check_interval: int  # steps between validations
    limit_val_batches: int  # global batches per validation; 0 disables validation
    limit_test_batches: int  # global batches of the test split evaluated after the last step; 0 skips it
    accumulate_grad_batches: int = 1  # must be 1: accumulation comes from global_batch_size / micro_batch_size
    gradient_clip_val: float | None = None  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices")
        self.check_run_length(key)
        positive_fields(self, key, "log_every_n_steps", "val_check_interval")
        non_negative_fields(self, key, "limit_val_batches", "limit_test_batches")
        must_be_one(
            self,
            key,
            "accumulate_grad_batches",
            fix="must be 1: gradient accumulation follows from model.global_batch_size / micro_batch_size",
        )
        if self.gradient_clip_val is not None:
            non_negative(f"{key}.gradient_clip_val", self.gradient_clip_val)
        if self.accelerator == "cpu" and self.precision_name() != "fp32":
            raise field_fault(
                self,
                key,
                "precision",
                "needs accelerator gpu (megatron-core's mixed-precision optimizer only wraps CUDA tensors); "
                "use 32 on the CPU",
            )

    def check_run_length(self, key: str) -> None:
        """How long the run is: max_steps optimizer steps (a family that also sizes runs in epochs overrides it)."""
        positive(f"{key}.max_steps", self.max_steps)


@dataclasses.dataclass(frozen=True)
class CheckpointParams:
    every_n_train_steps: int  # steps between checkpoints; also saved at the end, at max_time and on SIGTERM/SIGUSR1
    save_top_k: int  # newest N complete checkpoints are kept; -1 keeps all

    def check(self, key: str) -> None:
        positive(f"{key}.every_n_train_steps", self.every_n_train_steps)
        if self.save_top_k == 0 or self.save_top_k < -1:
            raise field_fault(
                self,
                key,
                "save_top_k",
                "must be >= 1 or -1 (keep all); to save nothing set exp_manager.create_checkpoint_callback: false",
            )


@dataclasses.dataclass(frozen=True)
class ExpManagerSection:
    explicit_log_dir: str  # TensorBoard events here, checkpoints in <explicit_log_dir>/checkpoints/step-<N>
    checkpoint_callback_params: CheckpointParams
    create_tensorboard_logger: bool = True
    create_wandb_logger: bool = False  # needs the wandb package and wandb_api_key_file (or a prior `wandb login`)
    wandb_logger_kwargs: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # passed to WandbLogger (project, name, ...)
    resume_if_exists: bool = True  # continue from the newest complete checkpoint in explicit_log_dir
    resume_ignore_no_checkpoint: bool = True  # false: resume_if_exists with no checkpoint is an error
    # No complete checkpoint matches the sizes and checksums its save recorded: fail (exit 74) or start over
    # (contract/checkpoint_damage.py). A damaged newest one with a sound older one always falls back to it.
    on_all_checkpoints_damaged: AllCheckpointsDamaged = "fail"
    create_checkpoint_callback: bool = True  # false: never save (signals and max_time then just stop)
    log_step_timing: bool = True  # log train_step_timing (seconds per step)


@dataclasses.dataclass(frozen=True)
class SchedSection:
    name: Literal["CosineAnnealing"]
    warmup_steps: int = 0  # linear warm-up from lr / (warmup_steps + 1) to lr
    constant_steps: int = 0  # steps held at min_lr at the end of the run
    min_lr: float = 0.0  # floor of the cosine decay

    def check(self, key: str) -> None:
        non_negative_fields(self, key, "warmup_steps", "constant_steps", "min_lr")


def check_schedule(model, trainer, key: str, sizing=None) -> None:
    """The learning-rate schedule must leave at least one step of cosine decay within trainer.max_steps
    (the trainer's CosineSchedule divides by that count). Shared by every stage whose model has an `optim`.

    A run sized in epochs (trainer.max_steps null) is checked once its steps are known: `sizing` (epochs.py's
    EpochSizing) says how they were derived, and the fix then names max_epochs."""
    if trainer.max_steps is None:
        return
    sched = model.optim.sched
    if sched.warmup_steps + sched.constant_steps >= trainer.max_steps:
        length = f"trainer.max_steps({trainer.max_steps})" if sizing is None else f"the run's {sizing}"
        raise config_fault(
            f"{key}.model.optim.sched.warmup_steps",
            sched.warmup_steps,
            f"warmup_steps({sched.warmup_steps}) + constant_steps({sched.constant_steps}) must be below "
            f"{length} to leave a step of cosine decay; "
            f"lower warmup_steps or constant_steps, or raise trainer.{'max_steps' if sizing is None else 'max_epochs'}",
        )


@dataclasses.dataclass(frozen=True)
class OptimSection:
    name: Literal["distributed_fused_adam", "fused_adam", "adamw"]  # all Adam with decoupled weight decay
    lr: float  # peak learning rate
    sched: SchedSection
    weight_decay: float = 0.0  # not applied to biases and norm weights
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])

    def check(self, key: str) -> None:
        positive(f"{key}.lr", self.lr)
        non_negative(f"{key}.weight_decay", self.weight_decay)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise field_fault(self, key, "betas", "expected [beta1, beta2], each in [0, 1)")
        if self.sched.min_lr > self.lr:
            raise config_fault(f"{key}.sched.min_lr", self.sched.min_lr, f"is above optim.lr ({self.lr}); lower it")


def check_splits(key: str, splits_string: str) -> None:
    """`splits_string`: up to three train,validation,test weights (`,` or `/` between them)."""
    parts = splits_string.replace("/", ",").split(",")
    try:
        weights = [float(p) for p in parts]
    except ValueError:
        raise config_fault(key, splits_string, "use 'train,validation,test' weights, e.g. '99990,8,2'") from None
    if len(weights) > 3 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise config_fault(key, splits_string, "needs up to 3 weights >= 0, not all 0")
    if weights[0] == 0:
        # megatron-core would build no training split and the job would stop at its first batch.
        raise config_fault(
            key, splits_string, "the first weight is the training share and leaves no training data; e.g. '98,1,1'"
        )


def blend(prefix: list[float | str], key: str) -> list[float | str]:
    """`data_prefix` as [weight, prefix, ...]; a single prefix gets weight 1."""
    if len(prefix) == 1 and isinstance(prefix[0], str):
        return _named_without_suffix([1.0, prefix[0]], key)
    pairs_ok = (
        len(prefix) >= 2
        and len(prefix) % 2 == 0
        and all(isinstance(w, float) or (isinstance(w, int) and not isinstance(w, bool)) for w in prefix[0::2])
        and all(isinstance(p, str) for p in prefix[1::2])
    )
    if not pairs_ok or any(w < 0 for w in prefix[0::2]) or sum(prefix[0::2]) <= 0:
        raise config_fault(key, prefix, "expected [weight, prefix, weight, prefix, ...] with weights >= 0")
    return _named_without_suffix(list(prefix), key)


def _named_without_suffix(pairs: list[float | str], key: str) -> list[float | str]:
    """The job opens <prefix>.bin and <prefix>.idx: a prefix written as "x.bin" would be read as x.bin.bin."""
    for path in pairs[1::2]:
        if path.endswith((".bin", ".idx")):
            raise config_fault(key, path, f"name the dataset without .bin/.idx: {path[:-4]} (both files are read)")
    return pairs


def data_reads(run: RunSection, data, stage: str, blended: str = "*.idx") -> list[tuple[str, str]]:
    """(key, path or glob) of the data files a trainer opens: what the automatic blend reads in
    run.preprocessed_dir (matching `blended`), or each prefix's .bin/.idx."""
    if data.data_prefix is None:
        return [(f"{stage}.run.preprocessed_dir", f"{run.preprocessed_dir}/{blended}")]
    return [
        (f"{stage}.model.data.data_prefix", f"{prefix}{suffix}")
        for prefix in data.blend()[1::2]
        for suffix in (".bin", ".idx")
    ]


def check_data_source(run: RunSection, data, key: str) -> None:
    if data.data_prefix is None and not run.preprocessed_dir:
        raise config_fault(
            f"{key}.run.preprocessed_dir",
            None,
            "model.data.data_prefix is null, so the data is every .bin/.idx pair in run.preprocessed_dir: "
            "set one of them",
        )


# model.data.dataloader_type: single and cyclic read indexed datasets; LDDL, BERT's alone, length-binned pairs.
DataloaderType = Literal["single", "cyclic", "LDDL"]


def check_indexed_loader(data, key: str) -> None:
    """A family that reads indexed datasets refuses LDDL, saying where it applies."""
    if data.dataloader_type == "LDDL":
        raise field_fault(
            data,
            key,
            "dataloader_type",
            "LDDL's length-binned loader is BERT's (training=bert/<size> on data_preparation="
            "bert/download_bert_pile_lddl); this family reads indexed .bin/.idx data: use single or cyclic",
        )


@dataclasses.dataclass(frozen=True)
class MaskedLmData:
    """The data keys of megatron-core's masked word-piece datasets (T5 span corruption, BERT masked tokens).

    Each sample is a run of whole sentences of one document; masking works on words (a word-piece starting
    with `##` joins the word before it)."""

    seq_length: int  # tokens per sample; must equal model.encoder_seq_length
    splits_string: str = "99990,8,2"  # train,validation,test weights of each file's documents
    num_workers: int = 2  # DataLoader worker processes per rank
    # single: dataset order; cyclic: reshuffled each pass; LDDL: BERT's length bins (bert_training.BertData)
    dataloader_type: DataloaderType = "single"
    index_mapping_dir: str | None = None  # megatron-core's sample-index cache; null = beside each data file
    data_prefix: list[float | str] | None = None  # [weight, prefix, ...]; null = automatic blend
    masked_lm_prob: float = 0.15  # share of a sample's tokens that is masked
    short_seq_prob: float = 0.1  # probability that a sample is cut shorter than seq_length
    max_ngram_size: int = 3  # longest masked span, in words
    whole_word_masking: bool = True  # mask every piece of a word together
    permutation: bool = False  # also shuffle some spans instead of masking them (not with geometric_dist)
    favor_longer_ngrams: bool = False  # span lengths n with weights n / sum (else 1/n: short spans first)
    geometric_dist: bool = False  # span lengths ~ Geometric(p=0.2) clipped at max_ngram_size (SpanBERT)

    def check(self, key: str) -> None:
        check_indexed_loader(self, key)
        positive(f"{key}.seq_length", self.seq_length)
        non_negative(f"{key}.num_workers", self.num_workers)
        check_splits(f"{key}.splits_string", self.splits_string)
        if self.data_prefix is not None:
            self.blend(key)
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise field_fault(self, key, "masked_lm_prob", "must be in (0, 1), e.g. 0.15")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise field_fault(self, key, "short_seq_prob", "must be in [0, 1], e.g. 0.1")
        positive(f"{key}.max_ngram_size", self.max_ngram_size)
        if self.permutation and self.geometric_dist:
            raise config_fault(
                f"{key}.permutation",
                True,
                "megatron-core's masking cannot permute spans whose lengths are drawn geometrically: "
                "set permutation or geometric_dist to false",
            )

    def blend(self, key: str = "training.model.data") -> list[float | str]:
        return blend(self.data_prefix, f"{key}.data_prefix")

    def most_masked_tokens(self) -> int:
        """The most tokens one sample masks: megatron-core masks at most masked_lm_prob of a sample's tokens, and
        a sample holds at most seq_length - 2 of them (T5 adds bos and eos, BERT cls and sep, and a second sep)."""
        return int(self.masked_lm_prob * (self.seq_length - 2))


def check_recompute(model, key: str) -> None:
    """Full activation recompute needs a method and a layer count."""
    if model.activations_checkpoint_granularity == "full":
        if model.activations_checkpoint_method is None or not model.activations_checkpoint_num_layers:
            raise config_fault(
                f"{key}.activations_checkpoint_granularity",
                "full",
                "full recompute needs activations_checkpoint_method (uniform or block) and "
                "activations_checkpoint_num_layers >= 1",
            )


def check_heads(model, key: str) -> None:
    """Per-head size: kv_channels, or hidden_size / num_attention_heads when that divides."""
    if model.kv_channels is None and model.hidden_size % model.num_attention_heads:
        raise field_fault(
            model,
            key,
            "hidden_size",
            f"is not divisible by num_attention_heads ({model.num_attention_heads}); set kv_channels",
        )
    if model.kv_channels is not None:
        positive(f"{key}.kv_channels", model.kv_channels)


# The widths of a transformer layer and the model-parallel split: positive in every family's model section.
LAYER_WIDTHS = ("hidden_size", "ffn_hidden_size", "num_attention_heads")
MODEL_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size")


def check_stack_sizes(section, key: str, *sizes: str) -> None:
    """The named sizes of a section holding a transformer stack are positive (in this order); its hidden and
    attention dropouts are in [0, 1)."""
    positive_fields(section, key, *sizes)
    fraction(f"{key}.hidden_dropout", section.hidden_dropout)
    fraction(f"{key}.attention_dropout", section.attention_dropout)


# Activation recompute: selective (attention only) or full (whole layers, by method and count); null = none.
Recompute = Literal["selective", "full"] | None
RecomputeMethod = Literal["uniform", "block"] | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """How megatron-core builds any family's model and trades memory for compute: the keys every model section
    has alike (check_recompute checks the recompute ones)."""

    seed: int = 1234
    use_cpu_initialization: bool = False  # init weights on the CPU: identical values for any TP size
    transformer_engine: bool = True  # TE layer specs when transformer_engine is importable
    activations_checkpoint_granularity: Recompute = None
    activations_checkpoint_method: RecomputeMethod = None  # full recompute only
    activations_checkpoint_num_layers: int | None = None  # full recompute only


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerStack(BuildSettings):
    """The sizes, batch and tensor/pipeline split of a model section that is one stack of transformer layers
    (GPT, BERT, DiT), and their checks; a family's section inherits it and may change a default."""

    micro_batch_size: int  # samples per forward pass per data-parallel rank
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    sequence_parallel: bool = False  # needs TP > 1 and Transformer Engine norms
    kv_channels: int | None = None  # per-head size; null = hidden_size / num_attention_heads
    init_method_std: float = 0.02
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layernorm_epsilon: float = 1.0e-5

    def check_sizes(self, key: str, *more_positive: str) -> None:
        """Every size, batch and split is positive (and the family's `more_positive` keys); dropouts in [0, 1)."""
        check_stack_sizes(
            self,
            key,
            "micro_batch_size",
            "global_batch_size",
            "num_layers",
            *LAYER_WIDTHS,
            *MODEL_PARALLEL,
            *more_positive,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoderStackSection(LayerStack):
    """The keys and rules of a model section whose one stack of layers megatron-core splits over pipeline stages,
    and each stage into virtual stages (the interleaved 1F1B schedule): GPT's and BERT's. A family's section
    inherits it and adds its tokenizer, optimizer and data sections (`data` must have `seq_length`) and its own keys.
    """

    virtual_pipeline_model_parallel_size: int | None = None  # model chunks per pipeline stage (interleaved 1F1B)
    encoder_seq_length: int  # tokens per sample (each family sets its default)
    max_position_embeddings: int  # rows of the learned position table (each family sets its default)
    make_vocab_size_divisible_by: int = 128  # vocab padded to a multiple of this x TP
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"
    share_embeddings_and_output_weights: bool = True  # the LM head's output layer reuses the token embeddings

    def check(self, key: str) -> None:
        self.check_sizes(key, "encoder_seq_length", "max_position_embeddings", "make_vocab_size_divisible_by")
        if self.data.seq_length != self.encoder_seq_length:
            raise config_fault(
                f"{key}.data.seq_length",
                self.data.seq_length,
                f"must equal {key}.encoder_seq_length ({self.encoder_seq_length})",
            )
        if (
            self.position_embedding_type == "learned_absolute"
            and self.max_position_embeddings < self.encoder_seq_length
        ):
            raise field_fault(
                self,
                key,
                "max_position_embeddings",
                f"is below encoder_seq_length ({self.encoder_seq_length}): learned positions need one row per token",
            )
        check_heads(self, key)
        self.check_pipeline(key)
        check_recompute(self, key)

    def virtual_pipeline_size(self) -> int:
        """Model chunks per pipeline stage; 1 without the interleaved schedule."""
        return self.virtual_pipeline_model_parallel_size or 1

    def check_pipeline(self, key: str) -> None:
        """The layers split evenly over PP x virtual PP chunks; virtual stages need a pipeline to interleave."""
        vpp = self.virtual_pipeline_model_parallel_size
        if vpp is not None:
            positive(f"{key}.virtual_pipeline_model_parallel_size", vpp)
        pp, chunks = self.pipeline_model_parallel_size, self.virtual_pipeline_size()
        if self.num_layers % (pp * chunks):
            raise field_fault(
                self,
                key,
                "num_layers",
                f"must be divisible by PP({pp}) x virtual PP({chunks}) = {pp * chunks}; "
                "change num_layers or the pipeline sizes",
            )
        if chunks > 1 and pp < 2:
            raise config_fault(
                f"{key}.virtual_pipeline_model_parallel_size", vpp, "needs pipeline_model_parallel_size > 1"
            )

    def batch_sizes(self) -> list[int]:
        """Every global batch size the run uses (a family with a ramp-up lists its steps)."""
        return [self.global_batch_size]

    def check_interleaved_batches(self, key: str, micro_batches_step: int) -> None:
        """megatron-core's interleaved schedule runs microbatches in groups of PP: each global batch's count of
        microbatches (global batch / (micro batch x DP)) must be a multiple of PP."""
        pp = self.pipeline_model_parallel_size
        if self.virtual_pipeline_size() == 1:
            return
        for gbs in self.batch_sizes():
            if (gbs // micro_batches_step) % pp:
                raise config_fault(
                    f"{key}.global_batch_size",
                    gbs,
                    f"with the interleaved schedule the number of microbatches ({gbs} / {micro_batches_step} = "
                    f"{gbs // micro_batches_step}) must be a multiple of PP({pp})",
                )


def check_layout(model, nodes: int, devices: int, key: str) -> int:
    """The process-layout rules of a Megatron model on nodes x devices processes, each factor shown; returns DP.

    Shared by pretraining and fine-tuning of every family (a fine-tuning model section has fewer keys: the
    architecture comes from a .nemo there, so absent attributes are skipped). A model with context_parallel_size
    splits each sequence over CP ranks too: DP = nodes x devices / (TP x PP x CP), every factor shown.
    """
    m = f"{key}.model"
    tp, pp = model.tensor_model_parallel_size, model.pipeline_model_parallel_size
    has_cp = hasattr(model, "context_parallel_size")
    cp = model.context_parallel_size if has_cp else 1
    factors = f"TP({tp}) x PP({pp})" + (f" x CP({cp})" if has_cp else "")
    world = nodes * devices
    if world % (tp * pp * cp):
        raise config_fault(
            f"{m}.tensor_model_parallel_size",
            tp,
            f"{factors} = {tp * pp * cp} does not divide nodes({nodes}) x devices({devices}) = {world}; "
            "change the parallel sizes or trainer.num_nodes/trainer.devices",
        )
    dp = world // (tp * pp * cp)
    check_expert_layout(model, nodes, devices, m)  # MoE layers: their own grid with EP
    heads = getattr(model, "num_attention_heads", None)
    if heads is not None:
        if heads % tp:
            raise config_fault(
                f"{m}.num_attention_heads", heads, f"must be divisible by TP({tp}); pick a TP that divides {heads}"
            )
        groups = getattr(model, "num_query_groups", None) or heads
        if groups % tp:
            raise config_fault(f"{m}.num_query_groups", groups, f"must be divisible by TP({tp})")
        if model.ffn_hidden_size % tp:
            raise config_fault(f"{m}.ffn_hidden_size", model.ffn_hidden_size, f"must be divisible by TP({tp})")
    step = model.micro_batch_size * dp
    if model.global_batch_size % step:
        raise config_fault(
            f"{m}.global_batch_size",
            model.global_batch_size,
            f"must be a multiple of micro_batch_size({model.micro_batch_size}) x data-parallel size({dp}) = {step}, "
            f"where data-parallel size = nodes({nodes}) x devices({devices}) / ({factors})",
        )
    ramp = getattr(model, "rampup_batch_size", None)
    if ramp is not None:
        start, increment, _ = ramp
        if start % step or increment % step:
            raise config_fault(
                f"{m}.rampup_batch_size",
                ramp,
                f"start and increment must be multiples of micro_batch_size x data-parallel size = {step}",
            )
    if isinstance(model, DecoderStackSection):
        model.check_interleaved_batches(m, step)
    return dp


def check_world_size(trainer, world_size: int, key: str) -> None:
    """The processes actually started must be the ones the config asked for (the job's own check)."""
    expected = trainer.num_nodes * trainer.devices
    if world_size != expected:
        raise config_fault(
            f"{key}.trainer.devices",
            trainer.devices,
            f"trainer.num_nodes({trainer.num_nodes}) x trainer.devices({trainer.devices}) = {expected}, "
            f"but {world_size} processes were started; start one process per device",
        )


class TrainingStage(StageSchema, stage="training"):
    """What every schema of a stage that trains does alike (mixed into its frozen dataclass): bind its section
    (`training`, or the `stage` a fine-tuning schema names), write into exp_manager.explicit_log_dir, and check the
    layout against the processes started."""

    def writes(self) -> list[str]:
        return [self.exp_manager.explicit_log_dir]

    def data_parallel_size(self, world_size: int) -> int:
        """Checks the layout against the processes actually started; returns DP."""
        check_world_size(self.trainer, world_size, self.stage)
        return self.layout_data_parallel_size(world_size)

    def layout_data_parallel_size(self, world_size: int) -> int:
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, self.stage)

    def check_layout_and_schedule(self, key: str) -> None:
        """The model's process layout on trainer.num_nodes x trainer.devices, and its learning-rate schedule."""
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)
        check_schedule(self.model, self.trainer, key)


@dataclasses.dataclass(frozen=True)
class TrainingSections(TrainingStage):
    """The run, trainer and exp_manager sections a family's `training` schema starts with (a family may narrow
    their types by declaring them again: they keep their place); the family adds its `model`."""

    run: RunSection
    trainer: TrainerSection
    exp_manager: ExpManagerSection


@dataclasses.dataclass(frozen=True)
class TextPretrainingConfig(TrainingSections):
    """The `training` schema of a family pretraining on tokenized .bin/.idx text (GPT, BERT, T5), and its rules."""

    def check(self, key: str) -> None:
        check_data_source(self.run, self.model.data, key)
        self.check_layout_and_schedule(key)
