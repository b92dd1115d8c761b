"""Schema of the resolved `training` section of the CLIP family (conf/_family/clip_training.yaml): megatron-core's
vision tower (CLIPViTModel) and a megatron-core causal text transformer, each projected to output_dim, trained
with the symmetric contrastive loss over every image and caption of the global batch (features gathered across
data-parallel ranks), on image-caption WebDataset shards.

    cfg = ClipTrainingConfig.from_dict(section)    # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The seed's rules: no gradient accumulation (micro_batch_size x data-parallel GPUs = global_batch_size), and EMA
(exp_manager.ema.enable) only with model.megatron_amp_O2 false.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, non_negative, positive, positive_fields
from .common_training import (
    LAYER_WIDTHS,
    BuildSettings,
    ExpManagerSection,
    OptimSection,
    TrainingSections,
    check_heads,
    check_layout,
    check_schedule,
    check_stack_sizes,
)
from .vision_training import VisionTower, check_amp_o2, check_parallel

STAGE = "training"
# Byte tokens: 0 pads, 1 starts, 2 ends, byte b is b + 3 (what the tiny precache spec's text encoder reads too).
BYTE_VOCAB_SIZE = 259


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextTower:
    """A causal transformer over the caption's tokens; the features at its end-of-text token are the caption's."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    encoder_seq_length: int = 77  # tokens per caption, start and end tokens included (longer ones are cut)
    max_position_embeddings: int = 77  # rows of the learned position table
    kv_channels: int | None = None  # per-head size; null = hidden_size / num_attention_heads
    init_method_std: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layernorm_epsilon: float = 1.0e-5

    def check(self, key: str) -> None:
        check_stack_sizes(self, key, "num_layers", *LAYER_WIDTHS, "encoder_seq_length", "max_position_embeddings")
        if self.encoder_seq_length < 3:
            raise field_fault(
                self,
                key,
                "encoder_seq_length",
                "needs room for the start token, one text token and the end token: at least 3",
            )
        if self.max_position_embeddings < self.encoder_seq_length:
            raise field_fault(
                self,
                key,
                "max_position_embeddings",
                f"is below encoder_seq_length ({self.encoder_seq_length}): one position row per token",
            )
        check_heads(self, key)


@dataclasses.dataclass(frozen=True)
class ClipTokenizer:
    """byte: UTF-8 bytes (vocabulary 259, no files; the tiny configs). clip: CLIP's BPE from its vocab.json and
    merges.txt (transformers' CLIPTokenizer, read from the files; nothing is downloaded)."""

    library: Literal["byte", "clip"]
    vocab_file: str | None = None  # clip: vocab.json
    merge_file: str | None = None  # clip: merges.txt

    def check(self, key: str) -> None:
        for name in ("vocab_file", "merge_file"):
            value = getattr(self, name)
            if self.library == "clip" and not value:
                raise config_fault(
                    f"{key}.{name}", value, "tokenizer library clip reads CLIP's vocab.json and merges.txt: set both"
                )
            if self.library == "byte" and value:
                raise config_fault(
                    f"{key}.{name}", value, "the byte tokenizer reads no files: set null (or library: clip)"
                )

    def files(self) -> list[str]:
        return [f for f in (self.vocab_file, self.merge_file) if f]


@dataclasses.dataclass(frozen=True)
class ShardSet:
    """WebDataset shards of image-caption pairs: each entry is a wdinfo.pkl (generate_wdinfo), a .tar, or a folder
    whose complete .tar files are all read. An example is <key>.<image extension> and <key>.txt."""

    dataset_path: list[str]

    def check(self, key: str) -> None:
        if not self.dataset_path:
            raise field_fault(self, key, "dataset_path", "list at least one wdinfo.pkl, .tar or folder of tars")


@dataclasses.dataclass(frozen=True)
class ClipData:
    train: ShardSet
    validation: ShardSet | None = None  # held-out shards scored every val_check_interval steps; null: none
    num_workers: int = 2  # DataLoader worker processes per rank
    shuffle: bool = True  # shard order and the examples inside each shard reshuffled on every pass (seeded)
    # Steps read the examples in the order above; the trainer's global reshuffle ("cyclic") would jump between shards
    # at every sample and read each whole tar for one example, so it is not offered.
    dataloader_type: Literal["single"] = "single"

    def check(self, key: str) -> None:
        non_negative(f"{key}.num_workers", self.num_workers)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClipVision(VisionTower):
    output_dim: int | None = None  # must equal model.output_dim (the reference's interpolated copy)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClipText(TextTower):
    output_dim: int | None = None  # must equal model.output_dim


@dataclasses.dataclass(frozen=True)
class EmaSection:
    """An exponential moving average of the weights, updated after optimizer steps and saved in every checkpoint;
    validation scores it, and conversion writes it into the .nemo."""

    enable: bool = False
    decay: float = 0.9999  # ema = decay x ema + (1 - decay) x weights
    validate_original_weights: bool = False  # true: validation scores the trained weights instead of the average
    every_n_steps: int = 1  # optimizer steps between updates
    cpu_offload: bool = False  # keep the average in host memory (GPU runs)

    def check(self, key: str) -> None:
        if not 0.0 < self.decay < 1.0:
            raise field_fault(self, key, "decay", "must be in (0, 1), e.g. 0.9999")
        positive(f"{key}.every_n_steps", self.every_n_steps)


@dataclasses.dataclass(frozen=True)
class ClipExpManager(ExpManagerSection):
    ema: EmaSection = dataclasses.field(default_factory=EmaSection)


@dataclasses.dataclass(frozen=True)
class ClipModelSection(BuildSettings):
    micro_batch_size: int  # image-caption pairs per forward pass per data-parallel rank
    global_batch_size: int  # pairs per optimizer step: micro_batch_size x data-parallel size (no accumulation)
    output_dim: int  # width of the shared image-text embedding space
    vision: ClipVision
    text: ClipText
    tokenizer: ClipTokenizer
    optim: OptimSection
    data: ClipData
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1  # must be 1 (the seed's feature matrix)
    local_loss: bool = False  # true: each rank scores its own images and captions against the whole batch's
    gather_with_grad: bool = True  # true: gradients flow through the gathered features of other ranks too
    logit_scale_init: float = 2.6592  # log(1 / 0.07): initial temperature of the similarities
    logit_scale_max: float = 4.6052  # log(100): the learned log-scale is clamped here
    make_vocab_size_divisible_by: int = 128  # vocab padded to a multiple of this x TP
    megatron_amp_O2: bool = True  # half-precision weights, fp32 master copies (must be false with EMA)

    def check(self, key: str) -> None:
        check_parallel(self, key)
        positive_fields(self, key, "output_dim", "make_vocab_size_divisible_by")
        for tower in ("vision", "text"):
            given = getattr(self, tower).output_dim
            if given is not None and given != self.output_dim:
                raise config_fault(
                    f"{key}.{tower}.output_dim", given, f"must equal {key}.output_dim ({self.output_dim})"
                )
        if not 0.0 < self.logit_scale_init <= self.logit_scale_max:
            raise field_fault(
                self, key, "logit_scale_init", f"must be in (0, logit_scale_max ({self.logit_scale_max})]"
            )
        tp = self.tensor_model_parallel_size
        for tower in ("vision", "text"):
            section = getattr(self, tower)
            for name in ("num_attention_heads", "ffn_hidden_size"):
                if getattr(section, name) % tp:
                    raise config_fault(
                        f"{key}.{tower}.{name}", getattr(section, name), f"must be divisible by TP({tp})"
                    )


@dataclasses.dataclass(frozen=True)
class ClipTrainingConfig(TrainingSections):
    exp_manager: ClipExpManager
    model: ClipModelSection

    def check(self, key: str) -> None:
        model = self.model
        check_amp_o2(model, self.trainer, f"{key}.model")
        if self.exp_manager.ema.enable and model.megatron_amp_O2:
            raise config_fault(
                f"{key}.exp_manager.ema.enable",
                True,
                "EMA does not work with AMP O2 (the seed's rule): set training.model.megatron_amp_O2=False "
                "(with trainer.precision=32), or ema.enable=False",
            )
        if self.trainer.limit_val_batches and model.data.validation is None:
            raise config_fault(
                f"{key}.model.data.validation",
                None,
                "validation (trainer.limit_val_batches > 0) needs held-out shards: set "
                "validation.dataset_path, or limit_val_batches 0",
            )
        if self.trainer.limit_test_batches:
            raise config_fault(
                f"{key}.trainer.limit_test_batches",
                self.trainer.limit_test_batches,
                "CLIP has no test split here: set 0 (evaluation=clip/imagenet_zeroshot scores the model)",
            )
        self.data_parallel_size_of(self.trainer.num_nodes * self.trainer.devices, key)
        check_schedule(model, self.trainer, key)

    def data_parallel_size_of(self, world: int, key: str) -> int:
        """DP from the layout, with the seed's no-accumulation rule: micro_batch_size x GPUs (per TP group) =
        global_batch_size, every factor shown."""
        m = self.model
        tp = m.tensor_model_parallel_size
        if world % tp == 0 and m.micro_batch_size * (world // tp) != m.global_batch_size:
            dp = world // tp
            gpus = f"nodes({self.trainer.num_nodes}) x devices({self.trainer.devices})" + (
                f" / TP({tp})" if tp > 1 else ""
            )
            raise config_fault(
                f"{key}.model.global_batch_size",
                m.global_batch_size,
                f"CLIP has no gradient accumulation: micro_batch_size({m.micro_batch_size}) x GPUs "
                f"({gpus} = {dp}) = {m.micro_batch_size * dp} must equal it; set global_batch_size to "
                f"{m.micro_batch_size * dp} or change micro_batch_size or the node count",
            )
        return check_layout(m, self.trainer.num_nodes, self.trainer.devices, key)

    def reads(self) -> list[tuple[str, str]]:
        """(key, path) of what the trainer opens: the shard lists and the tokenizer's files."""
        data = self.model.data
        found = [(f"{STAGE}.model.data.train.dataset_path", p) for p in data.train.dataset_path]
        if data.validation is not None:
            found += [(f"{STAGE}.model.data.validation.dataset_path", p) for p in data.validation.dataset_path]
        found += [(f"{STAGE}.model.tokenizer", f) for f in self.model.tokenizer.files()]
        return found

    def layout_data_parallel_size(self, world_size: int) -> int:
        return self.data_parallel_size_of(world_size, STAGE)
