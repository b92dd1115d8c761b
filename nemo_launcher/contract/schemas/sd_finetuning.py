"""Schemas of the two Stable Diffusion fine-tunes (conf/training/instruct_pix2pix/*.yaml and conf/training/dreambooth/
*.yaml over conf/_family/{instruct_pix2pix,dreambooth}_training.yaml): stable_diffusion_training.py's latent-diffusion
training started from a Stable Diffusion checkpoint, on their own data.

    cfg = InstructPix2PixTrainingConfig.from_dict(section)   # or DreamBoothTrainingConfig
    cfg.starting_checkpoint()                                # the SD weights every network starts from

InstructPix2Pix (model.ckpt_path): the UNet reads the noisy latents beside the input image's (in_channels = 2 x
channels); the checkpoint's 4-channel first convolution is widened with zero weights, so step 0 computes what the SD
model does. Trained on (input image, instruction, edited image) triples with the authors' conditioning dropout.
DreamBooth (model.restore_from_path, a .nemo): instance images captioned by instance_prompt, with prior
preservation the class images (regularization_dir, filled up to num_reg_images by the .nemo's own text-to-image)
captioned by regularization_prompt, their loss weighted by prior_loss_weight. In both the VAE stays frozen, and the
text encoder too unless DreamBooth's train_text_encoder asks for it.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, non_negative, positive_fields
from .gpt_training import GptTrainerSection
from .sd_inference import Sampler
from .stable_diffusion_training import STAGE, SdModelSection, StableDiffusionTrainingConfig

DataloaderType = Literal["single", "cyclic"]  # map-style examples: in order, or reshuffled on every pass (seeded)


def _vae_factor(model) -> int:
    return 2 ** (len(model.first_stage_config.ddconfig.ch_mult) - 1)


class _FineTuneModel:
    """Rules both fine-tunes share (mixed into their model sections): every network starts from `starting_key`'s
    checkpoint, so nothing else may name weights for the VAE and the text encoder."""

    starting_key = ""

    def check_start(self, key: str) -> None:
        if not getattr(self, self.starting_key):
            raise config_fault(
                f"{key}.{self.starting_key}",
                getattr(self, self.starting_key),
                "name the Stable Diffusion checkpoint to start from (a .nemo, or a training checkpoint folder)",
            )
        if self.first_stage_config.from_pretrained:
            raise config_fault(
                f"{key}.first_stage_config.from_pretrained",
                self.first_stage_config.from_pretrained,
                f"the autoencoder's weights come from model.{self.starting_key} in a fine-tune: set null",
            )
        if self.cond_stage_config.pretrained:
            raise config_fault(
                f"{key}.cond_stage_config.pretrained",
                self.cond_stage_config.pretrained,
                f"the text encoder's weights come from model.{self.starting_key} in a fine-tune: set null "
                "and give its sizes (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads)",
            )

    def check_side(self, key: str, side: int) -> None:
        factor = _vae_factor(self)
        if side != self.image_size * factor:
            raise config_fault(
                key,
                side,
                f"images of {self.image_size * factor} px make the {self.image_size}-px latents "
                f"of model.image_size through the autoencoder (/{factor}): set "
                f"{self.image_size * factor} or change image_size",
            )


@dataclasses.dataclass(frozen=True)
class EditData:
    """The InstructPix2Pix authors' clip-filtered-dataset layout: seeds.json lists [folder, [seed, ...]] pairs;
    <folder>/prompt.json holds the instruction under "edit"; <folder>/<seed>_0.jpg is the input image and
    <seed>_1.jpg the edited one. Every (folder, seed) pair is one example."""

    data_path: str
    num_workers: int = 2  # DataLoader worker processes per rank
    dataloader_type: DataloaderType = "cyclic"
    resolution: int = 256  # both images are resized to this side (the shorter one) and centre-cropped square

    def check(self, key: str) -> None:
        non_negative(f"{key}.num_workers", self.num_workers)
        positive_fields(self, key, "resolution")


@dataclasses.dataclass(frozen=True)
class EditModelSection(_FineTuneModel, SdModelSection):
    starting_key = "ckpt_path"

    # The Stable Diffusion checkpoint fine-tuned: a .nemo, or a training checkpoint folder (its newest complete step).
    ckpt_path: str | None = None
    data: EditData | None = None
    # Share of samples trained without the instruction, without the input image, and without both (each; the
    # authors' 0.05), so the edit can be guided by text and by image apart.
    conditioning_dropout_rate: float = 0.05

    def check(self, key: str) -> None:
        super().check(key)
        self.check_start(key)
        if self.unet_config.in_channels != 2 * self.channels:
            raise config_fault(
                f"{key}.unet_config.in_channels",
                self.unet_config.in_channels,
                f"InstructPix2Pix's UNet reads the noisy latents and the input image's: set {2 * self.channels}",
            )
        if not 0.0 <= self.conditioning_dropout_rate <= 1.0 / 3.0:
            raise field_fault(
                self,
                key,
                "conditioning_dropout_rate",
                "must be in [0, 1/3] (three disjoint shares of the samples), e.g. 0.05",
            )
        if self.text_embedding_dropout_rate:
            raise field_fault(
                self,
                key,
                "text_embedding_dropout_rate",
                "InstructPix2Pix drops the instruction by conditioning_dropout_rate: set 0",
            )

    def check_pixels(self, key: str) -> None:
        self.check_side(f"{key}.data.resolution", self.data.resolution)


@dataclasses.dataclass(frozen=True)
class RegGeneration:
    """How missing regularization images are drawn from the starting .nemo (fw_inference text2img's keys)."""

    inference_steps: int = 50
    sampler_type: Sampler = "DDIM"
    unconditional_guidance_scale: float = 7.5
    seed: int = 1234  # image n of the folder is drawn from seed + n

    def check(self, key: str) -> None:
        positive_fields(self, key, "inference_steps", "unconditional_guidance_scale")


@dataclasses.dataclass(frozen=True)
class DreamBoothData:
    instance_dir: str  # the subject's photos (3-5, from different angles): every image file directly in it
    instance_prompt: str  # their caption, with the special token, e.g. "a photo of a sks dog"
    regularization_dir: str | None = None  # class images; generated here up to num_reg_images
    regularization_prompt: str | None = None  # their caption, the class alone, e.g. "a photo of a dog"
    num_reg_images: int = 10  # class images prior preservation trains on
    num_images_per_prompt: int = 4  # class images generated per sampling batch
    resolution: int = 512  # image side
    center_crop: bool = True  # shorter side to resolution, then the centre; false: the whole image squeezed square
    num_workers: int = 4
    dataloader_type: DataloaderType = "cyclic"
    reg_generation: RegGeneration = dataclasses.field(default_factory=RegGeneration)

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_reg_images", "num_images_per_prompt", "resolution")
        non_negative(f"{key}.num_workers", self.num_workers)
        if not self.instance_prompt.strip():
            raise field_fault(
                self, key, "instance_prompt", 'caption the subject with its special token, e.g. "a photo of a sks dog"'
            )


@dataclasses.dataclass(frozen=True)
class DreamBoothModelSection(_FineTuneModel, SdModelSection):
    starting_key = "restore_from_path"

    # The Stable Diffusion .nemo fine-tuned, and the model that draws the regularization images. The UNet starts
    # from unet_config.from_pretrained instead where that is set.
    restore_from_path: str | None = None
    data: DreamBoothData | None = None
    with_prior_preservation: bool = False
    prior_loss_weight: float = 0.5  # the class images' loss is added with this weight
    train_text_encoder: bool = False  # the seed's key; model.cond_stage_trainable must agree

    def check(self, key: str) -> None:
        super().check(key)
        self.check_start(key)
        if not self.restore_from_path.endswith(".nemo"):
            raise field_fault(
                self,
                key,
                "restore_from_path",
                "DreamBooth draws its regularization images from a .nemo: name one (nemo_stable_diffusion.nemo)",
            )
        if self.unet_config.in_channels != self.channels:
            raise config_fault(
                f"{key}.unet_config.in_channels",
                self.unet_config.in_channels,
                f"DreamBooth fine-tunes a text-to-image UNet: set {self.channels}",
            )
        if self.cond_stage_trainable != self.train_text_encoder:
            raise field_fault(
                self,
                key,
                "cond_stage_trainable",
                f"must equal train_text_encoder ({self.train_text_encoder}), the seed's key for it",
            )
        non_negative(f"{key}.prior_loss_weight", self.prior_loss_weight)
        if self.with_prior_preservation:
            for name in ("regularization_dir", "regularization_prompt"):
                if not getattr(self.data, name):
                    raise config_fault(
                        f"{key}.data.{name}",
                        getattr(self.data, name),
                        "prior preservation (with_prior_preservation true) needs it: set it, or "
                        "with_prior_preservation false",
                    )

    def check_pixels(self, key: str) -> None:
        self.check_side(f"{key}.data.resolution", self.data.resolution)


class _FineTuneTraining:
    """No held-out split in either fine-tune (the seed's configs validate nothing)."""

    def check_validation(self, key: str) -> None:
        if self.trainer.limit_val_batches:
            raise config_fault(
                f"{key}.trainer.limit_val_batches",
                self.trainer.limit_val_batches,
                "this fine-tune has no validation split: set 0",
            )

    def starting_checkpoint(self) -> str:
        return getattr(self.model, self.model.starting_key)

    def reads(self) -> list[tuple[str, str]]:
        """(key, path) of the starting checkpoint, the data folder and the tokenizer files."""
        data_key = self.DATA_KEY
        return [
            (f"{STAGE}.model.{self.model.starting_key}", self.starting_checkpoint()),
            (f"{STAGE}.model.data.{data_key}", getattr(self.model.data, data_key)),
            *self.network_reads(),
        ]


@dataclasses.dataclass(frozen=True)
class InstructPix2PixTrainingConfig(_FineTuneTraining, StableDiffusionTrainingConfig):
    DATA_KEY = "data_path"  # the data folder the launcher checks
    NEMO_FILE_NAME = "nemo_instruct_pix2pix.nemo"

    model: EditModelSection
    trainer: GptTrainerSection  # sized in steps only: the job counts no epochs over these data folders


@dataclasses.dataclass(frozen=True)
class DreamBoothTrainingConfig(_FineTuneTraining, StableDiffusionTrainingConfig):
    DATA_KEY = "instance_dir"  # the data folder the launcher checks
    NEMO_FILE_NAME = "nemo_dreambooth.nemo"

    model: DreamBoothModelSection
    trainer: GptTrainerSection  # sized in steps only: the job counts no epochs over these data folders

    def writes(self) -> list[str]:
        """The regularization images are written beside the run's own files."""
        extra = [self.model.data.regularization_dir] if self.model.with_prior_preservation else []
        return [*super().writes(), *extra]
