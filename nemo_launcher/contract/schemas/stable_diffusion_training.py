"""Schema of the resolved `training` section of the stable_diffusion family
(conf/_family/stable_diffusion_training.yaml): a latent-diffusion UNet trained to predict the noise (or velocity)
added to the latents of a frozen autoencoder, cross-attending to a frozen CLIP text encoder's features, on WebDataset
image-caption shards (precached latents and text embeddings, or images and captions encoded on the fly).

    cfg = StableDiffusionTrainingConfig.from_dict(section)  # the launcher before submitting; the trainer when it starts

The seed's rules: data parallelism only (no tensor or pipeline parallelism for SD), continuing stages load the UNet's
weights alone (model.unet_config.from_pretrained, from_NeMo), 10% caption dropout after the v1.1 stage
(model.text_embedding_dropout_rate). The networks' keys are stable_diffusion_model.py's.
"""

import dataclasses
import os

from ..binding import config_fault, field_fault, must_be_one, non_negative, positive_fields
from ..epochs import check_run_length, sized_in_steps, wdinfo_examples
from .clip_training import ClipExpManager, ShardSet
from .common_training import OptimSection, TrainingSections, check_schedule
from .gpt_training import GptTrainerSection
from .stable_diffusion_model import LatentDiffusionModel

STAGE = "training"
# first_stage_key / cond_stage_key values that mean "encode the example's image / caption on the fly".
RAW_IMAGES, RAW_CAPTIONS = "images", "captions"


@dataclasses.dataclass(frozen=True)
class Augmentations:
    """How an image becomes pixels when it is encoded on the fly (precached latents were made by the precache spec)."""

    resize_smallest_side: int = 256  # the shorter side is resized to this, keeping the aspect ratio
    center_crop_h_w: str = "256, 256"  # then the centre "H, W" is cut out
    horizontal_flip: bool = False  # mirror half of the samples (drawn from the seed and the sample number)

    def check(self, key: str) -> None:
        positive_fields(self, key, "resize_smallest_side")
        height, width = self.crop()
        if min(height, width) <= 0 or max(height, width) > self.resize_smallest_side:
            raise field_fault(
                self,
                key,
                "center_crop_h_w",
                f'expected "H, W", each in 1..resize_smallest_side ({self.resize_smallest_side})',
            )

    def crop(self) -> tuple[int, int]:
        try:
            height, width = (int(part) for part in self.center_crop_h_w.split(","))
        except ValueError:
            return 0, 0
        return height, width


@dataclasses.dataclass(frozen=True)
class SdData:
    train: ShardSet  # wdinfo.pkl files, tars or folders of tars (precache_encodings' or reorganize_tar's output)
    validation: ShardSet | None = None  # held-out shards scored every val_check_interval steps; null: none
    num_workers: int = 2  # DataLoader worker processes per rank
    shuffle: bool = True  # shard order and examples within each shard reshuffled on every pass (seeded)
    dataloader_type: str = "single"  # examples are read in shard order (a global reshuffle would reread whole tars)
    augmentations: Augmentations = dataclasses.field(default_factory=Augmentations)

    def check(self, key: str) -> None:
        non_negative(f"{key}.num_workers", self.num_workers)
        if self.dataloader_type != "single":
            raise field_fault(
                self, key, "dataloader_type", "WebDataset shards are read in shard order here: set single"
            )


@dataclasses.dataclass(frozen=True)
class SdModelSection(LatentDiffusionModel):
    micro_batch_size: int = 1  # samples per forward pass per data-parallel rank
    global_batch_size: int = 1  # samples per optimizer step over all data-parallel ranks
    optim: OptimSection | None = None
    data: SdData | None = None
    # "images": the example's image is encoded by the VAE at every step; any other value is the key of the
    # precached posterior (mean, log-variance) in the example's .pickle (the precache spec's `key`).
    first_stage_key: str = RAW_IMAGES
    # "captions": the example's .txt is encoded by the text encoder; any other value is the precached embedding's key.
    cond_stage_key: str = RAW_CAPTIONS
    text_embedding_dropout_rate: float = 0.0  # share of samples trained on the empty caption (classifier-free guidance)
    tensor_model_parallel_size: int = 1  # must be 1: SD trains data-parallel only (the seed's feature matrix)
    pipeline_model_parallel_size: int = 1  # must be 1
    use_cpu_initialization: bool = False

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "micro_batch_size", "global_batch_size")
        for name in ("optim", "data"):
            if getattr(self, name) is None:
                raise config_fault(f"{key}.{name}", None, "training needs this section")
        must_be_one(
            self,
            key,
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            fix="Stable Diffusion trains with data parallelism only (the seed's feature matrix): set 1",
        )
        if not 0.0 <= self.text_embedding_dropout_rate < 1.0:
            raise field_fault(self, key, "text_embedding_dropout_rate", "must be in [0, 1), e.g. 0.1")
        self.check_pixels(key)

    def check_pixels(self, key: str) -> None:
        """Images encoded on the fly must be the size whose latents model.image_size says."""
        if self.first_stage_key == RAW_IMAGES:
            crop = self.data.augmentations.crop()
            factor = 2 ** (len(self.first_stage_config.ddconfig.ch_mult) - 1)
            if crop != (self.image_size * factor,) * 2:
                raise config_fault(
                    f"{key}.data.augmentations.center_crop_h_w",
                    self.data.augmentations.center_crop_h_w,
                    f"images of {self.image_size * factor} px make the {self.image_size}-px latents of "
                    f"model.image_size through the autoencoder (/{factor}); crop to "
                    f'"{self.image_size * factor}, {self.image_size * factor}" or change image_size',
                )


@dataclasses.dataclass(frozen=True)
class SdTrainerSection(GptTrainerSection):
    """GPT's trainer keys, but a run may be sized in passes over its shards, as the seed's 860m_res_256 is (its
    example trains `training.trainer.max_epochs=10`): the job derives max_steps from the shards it lists."""

    max_steps: int | None  # optimizer steps of the whole run; null when max_epochs sizes it
    max_epochs: int | None = None  # passes over model.data.train; null when max_steps sizes the run

    def check_run_length(self, key: str) -> None:
        check_run_length(self, key)


@dataclasses.dataclass(frozen=True)
class StableDiffusionTrainingConfig(TrainingSections):
    NEMO_FILE_NAME = "nemo_stable_diffusion.nemo"  # what a finished run writes into checkpoints/ (ClassVar: no key)

    trainer: SdTrainerSection
    exp_manager: ClipExpManager
    model: SdModelSection

    def check(self, key: str) -> None:
        self.check_validation(key)
        if self.trainer.limit_test_batches:
            raise config_fault(
                f"{key}.trainer.limit_test_batches",
                self.trainer.limit_test_batches,
                "Stable Diffusion has no test split here: set 0 (evaluation=stable_diffusion/fid_clip scores it)",
            )
        self.check_layout_and_schedule(key)
        listed = self.listed_train_samples()
        if listed is not None:
            self.sized_by_epochs(listed, key)

    def listed_train_samples(self) -> int | None:
        """Training examples of a run sized in epochs whose shards are all listed by wdinfo.pkl files already on
        disk (the launcher counts them from those files); None otherwise: the job counts what it opens (tars and
        folders of tars are read header by header, too slow a walk for a login node)."""
        if self.trainer.max_epochs is None:
            return None
        counts = [wdinfo_examples(path) for path in self.model.data.train.dataset_path]
        return None if None in counts else sum(counts)

    def sized_by_epochs(self, samples: int, key: str = STAGE):
        """(this config with trainer.max_steps derived from max_epochs over `samples`, its EpochSizing), the
        schedule checked against the derived steps. The launcher calls it when listed_train_samples() knows the
        data; the job always, with the examples of the shards it opened."""
        sized, sizing = sized_in_steps(self, samples)
        sizing.check(f"{key}.model.data.train.dataset_path")
        check_schedule(sized.model, sized.trainer, key, sizing)
        return sized, sizing

    def check_validation(self, key: str) -> None:
        if self.trainer.limit_val_batches and self.model.data.validation is None:
            raise config_fault(
                f"{key}.model.data.validation",
                None,
                "validation (trainer.limit_val_batches > 0) needs held-out shards: set "
                "validation.dataset_path, or limit_val_batches 0",
            )

    def reads(self) -> list[tuple[str, str]]:
        """(key, path) of what the trainer opens: shards, tokenizer files, the weights it starts from."""
        data = self.model.data
        found = [(f"{STAGE}.model.data.train.dataset_path", p) for p in data.train.dataset_path]
        if data.validation is not None:
            found += [(f"{STAGE}.model.data.validation.dataset_path", p) for p in data.validation.dataset_path]
        return found + self.network_reads()

    def network_reads(self) -> list[tuple[str, str]]:
        """(key, path) of the tokenizer files and the pretrained weights the networks are built from."""
        m = self.model
        found = [(f"{STAGE}.model.tokenizer", f) for f in m.tokenizer.files()]
        for name, path in (
            ("unet_config.from_pretrained", m.unet_config.from_pretrained),
            ("first_stage_config.from_pretrained", m.first_stage_config.from_pretrained),
            ("cond_stage_config.pretrained", m.cond_stage_config.pretrained),
        ):
            if path:
                found.append((f"{STAGE}.model.{name}", path))
        return found

    def nemo_path(self) -> str:
        """Where the finished run writes its .nemo (what later stages read by default)."""
        return os.path.join(self.exp_manager.explicit_log_dir, "checkpoints", self.NEMO_FILE_NAME)
