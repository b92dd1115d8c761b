"""Schema of a Stable Diffusion `model:` section: the UNet, the VAE (first stage), the CLIP text encoder (condition
stage) and the noise schedule, with the seed's (NeMo's LDM) key names. Training, inference, evaluation and export
all bind the same section, so a `.nemo` written by training carries it and every later stage reads it back.

    net = bind(LatentDiffusionModel, section, "training.model")   # what jobs/stable_diffusion/model.py builds from

The networks are diffusers' UNet2DConditionModel and AutoencoderKL and transformers' CLIPTextModel; the LDM keys
map onto their constructors as jobs/stable_diffusion/model.py says. What those classes cannot build is refused here.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, positive, positive_fields
from .clip_training import ClipTokenizer


@dataclasses.dataclass(frozen=True)
class UnetConfig:
    """LDM's UNetModel keys. A level i (of len(channel_mult)) has attention when 2**i is in attention_resolutions."""

    # Continuing training (the seed's staged recipe) loads the UNet's weights alone from here: a .nemo or a training
    # checkpoint folder with from_NeMo true, a diffusers UNet folder (config.json + weights, or a pipeline folder
    # holding unet/) with from_NeMo false. null: random initialisation from model.seed.
    from_pretrained: str | None = None
    from_NeMo: bool = True
    image_size: int = 32  # latent side the UNet is sized for (informational for diffusers; any multiple works)
    in_channels: int = 4  # latent channels (8 for InstructPix2Pix: noisy latents + the input image's latents)
    out_channels: int = 4
    model_channels: int = 320  # channels of the first level
    channel_mult: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 4, 4])  # per level, x model_channels
    attention_resolutions: list[int] = dataclasses.field(default_factory=lambda: [4, 2, 1])  # downsampling factors
    num_res_blocks: int = 2  # residual blocks per level
    num_heads: int | None = 8  # attention heads of every level (SD 1.x); null with num_head_channels
    num_head_channels: int | None = None  # channels per head (SD 2.x: 64); null with num_heads
    transformer_depth: int = 1  # transformer blocks per attention level
    context_dim: int = 768  # width of the text embeddings cross-attended to
    use_linear_in_transformer: bool = False  # SD 2.x: linear projections in and out of the transformers
    use_checkpoint: bool = False  # recompute the UNet's activations in backward (diffusers' gradient checkpointing)
    use_flash_attention: bool = True  # scaled_dot_product_attention (flash kernels on GPUs; what diffusers uses)
    norm_num_groups: int = 32  # GroupNorm groups: must divide every level's channels

    def check(self, key: str) -> None:
        positive_fields(
            self,
            key,
            "image_size",
            "in_channels",
            "out_channels",
            "model_channels",
            "num_res_blocks",
            "transformer_depth",
            "context_dim",
            "norm_num_groups",
        )
        if not self.channel_mult or not all(isinstance(m, int) and m > 0 for m in self.channel_mult):
            raise field_fault(self, key, "channel_mult", "list one positive multiplier per level, e.g. [1, 2, 4, 4]")
        levels = {2**i for i in range(len(self.channel_mult))}
        for resolution in self.attention_resolutions:
            if resolution not in levels:
                raise field_fault(
                    self,
                    key,
                    "attention_resolutions",
                    f"{resolution} is no level's downsampling factor; choose from {sorted(levels)}",
                )
        if (self.num_heads is None) == (self.num_head_channels is None):
            raise field_fault(
                self, key, "num_heads", "set exactly one of num_heads (SD 1.x: 8) and num_head_channels (SD 2.x: 64)"
            )
        for channels in self.block_channels():
            if channels % self.norm_num_groups:
                raise field_fault(
                    self, key, "norm_num_groups", f"must divide every level's channels {self.block_channels()}"
                )
            if self.num_head_channels is not None and channels % self.num_head_channels:
                raise field_fault(
                    self, key, "num_head_channels", f"must divide every level's channels {self.block_channels()}"
                )
        if self.from_pretrained == "":
            raise config_fault(f"{key}.from_pretrained", "", "name a checkpoint, or null to start from random weights")

    def block_channels(self) -> list[int]:
        return [self.model_channels * m for m in self.channel_mult]


@dataclasses.dataclass(frozen=True)
class DdConfig:
    """LDM's encoder/decoder keys of the AutoencoderKL."""

    double_z: bool = True  # the encoder outputs mean and log-variance (must be true: a KL autoencoder)
    z_channels: int = 4  # latent channels (must equal embed_dim)
    resolution: int = 256  # image side the autoencoder is sized for
    in_channels: int = 3
    out_ch: int = 3
    ch: int = 128  # channels of the first level
    ch_mult: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 4, 4])
    num_res_blocks: int = 2
    attn_resolutions: list[int] = dataclasses.field(default_factory=list)  # must be empty (attention only mid-block)
    dropout: float = 0.0  # must be 0 (the autoencoder is frozen)

    def check(self, key: str) -> None:
        positive_fields(self, key, "z_channels", "resolution", "in_channels", "out_ch", "ch", "num_res_blocks")
        if not self.double_z:
            raise field_fault(self, key, "double_z", "a KL autoencoder encodes mean and log-variance: set true")
        if self.attn_resolutions:
            raise field_fault(
                self,
                key,
                "attn_resolutions",
                "diffusers' AutoencoderKL attends only in its middle block, as SD's does: set []",
            )
        if self.dropout:
            raise field_fault(self, key, "dropout", "the autoencoder is frozen here: set 0.0")
        if not self.ch_mult or not all(isinstance(m, int) and m > 0 for m in self.ch_mult):
            raise field_fault(self, key, "ch_mult", "list one positive multiplier per level, e.g. [1, 2, 4, 4]")


@dataclasses.dataclass(frozen=True)
class FirstStageConfig:
    """The frozen KL autoencoder that maps images to latents and back."""

    # A diffusers AutoencoderKL folder (config.json + weights, or a pipeline folder holding vae/); null: weights from
    # `seed` (the tiny configs' stand-in for real weights, which nothing here can download).
    from_pretrained: str | None = None
    embed_dim: int = 4
    ddconfig: DdConfig = dataclasses.field(default_factory=DdConfig)
    norm_num_groups: int = 32  # must divide every level's channels
    seed: int = 0  # initialisation without from_pretrained; the precache spec of a tiny config uses the same

    def check(self, key: str) -> None:
        positive(f"{key}.embed_dim", self.embed_dim)
        if self.ddconfig.z_channels != self.embed_dim:
            raise config_fault(
                f"{key}.ddconfig.z_channels",
                self.ddconfig.z_channels,
                f"must equal embed_dim ({self.embed_dim}): diffusers' AutoencoderKL has one latent width",
            )
        for channels in (self.ddconfig.ch * m for m in self.ddconfig.ch_mult):
            if channels % self.norm_num_groups:
                raise field_fault(self, key, "norm_num_groups", f"must divide every level's channels ({channels})")


@dataclasses.dataclass(frozen=True)
class CondStageConfig:
    """The frozen CLIP text encoder (transformers' CLIPTextModel). SD 1.x reads its last layer (openai's ViT-L/14
    text tower, 768 wide); SD 2.x the penultimate one of OpenCLIP ViT-H/14's (1024 wide), through the final norm."""

    pretrained: str | None = None  # a transformers CLIPTextModel folder; null: sizes below, weights from `seed`
    layer: Literal["last", "penultimate"] = "last"
    max_length: int = 77  # tokens per caption, start and end included
    hidden_size: int | None = None  # without pretrained: the tower's sizes (hidden_size must equal context_dim)
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    hidden_act: str = "quick_gelu"  # openai's CLIP; OpenCLIP's towers (SD 2.x) use gelu
    seed: int = 0

    def check(self, key: str) -> None:
        positive(f"{key}.max_length", self.max_length)
        sizes = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        if self.pretrained is None:
            for name in sizes:
                if getattr(self, name) is None:
                    raise config_fault(
                        f"{key}.{name}", None, "without pretrained, the text encoder is built from its sizes: set it"
                    )
                positive(f"{key}.{name}", getattr(self, name))
            if self.layer == "penultimate" and self.num_hidden_layers < 2:
                raise field_fault(self, key, "num_hidden_layers", "layer penultimate needs at least 2 layers")


@dataclasses.dataclass(frozen=True)
class LatentDiffusionModel:
    """The networks and the forward process, what a .nemo of the family stores as its model_config.yaml."""

    unet_config: UnetConfig
    first_stage_config: FirstStageConfig
    cond_stage_config: CondStageConfig
    tokenizer: ClipTokenizer  # the text encoder's: CLIP's BPE files, or bytes for the tiny configs
    timesteps: int = 1000  # steps of the forward process
    linear_start: float = 0.00085  # beta at the first step
    linear_end: float = 0.012  # beta at the last step
    beta_schedule: Literal["linear", "cosine"] = (
        "linear"  # LDM's linear is linear in sqrt(beta) (diffusers' scaled_linear)
    )
    parameterization: Literal["eps", "v"] = "eps"  # the UNet predicts the noise (SD 1.x, 2.0-base) or the velocity
    scale_factor: float = 0.18215  # latents are the autoencoder's sample x this (unit variance for SD's VAE)
    channels: int = 4  # latent channels
    image_size: int = 32  # latent side (image side / 8 for SD's VAE)
    cond_stage_trainable: bool = False  # DreamBooth's train_text_encoder sets it; otherwise the text encoder is frozen
    seed: int = 1234

    def check(self, key: str) -> None:
        positive_fields(self, key, "timesteps", "channels", "image_size", "scale_factor")
        if not 0.0 < self.linear_start < self.linear_end < 1.0:
            raise field_fault(self, key, "linear_start", f"needs 0 < linear_start < linear_end ({self.linear_end}) < 1")
        if self.first_stage_config.embed_dim != self.channels:
            raise field_fault(
                self, key, "channels", f"must equal first_stage_config.embed_dim ({self.first_stage_config.embed_dim})"
            )
        if self.unet_config.out_channels != self.channels:
            raise config_fault(
                f"{key}.unet_config.out_channels",
                self.unet_config.out_channels,
                f"the UNet predicts {self.channels}-channel latents: set {self.channels}",
            )
        if self.unet_config.in_channels not in (self.channels, 2 * self.channels):
            raise config_fault(
                f"{key}.unet_config.in_channels",
                self.unet_config.in_channels,
                f"{self.channels} (text to image) or {2 * self.channels} (InstructPix2Pix: the input image's "
                "latents beside the noisy ones)",
            )
        text = self.cond_stage_config
        if text.pretrained is None and text.hidden_size != self.unet_config.context_dim:
            raise config_fault(
                f"{key}.cond_stage_config.hidden_size",
                text.hidden_size,
                f"the UNet cross-attends to {self.unet_config.context_dim}-wide text: must equal "
                "unet_config.context_dim",
            )
