"""Stable Diffusion's networks, built from a bound `model:` section with the libraries that define them: diffusers'
UNet2DConditionModel, AutoencoderKL and DDPMScheduler, transformers' CLIPTextModel.

    # model_section: a LatentDiffusionModel (contract/schemas/stable_diffusion_model.py)
    parts = build_stable_diffusion(model_section)
    context = parts.encode_text(["a red circle"])          # [b, max_length, context_dim]
    latents = parts.encode_images(pixels)                  # pixels [b, 3, H, W] in [-1, 1] -> scaled latents
    parts = load_stable_diffusion("results/checkpoints/nemo_stable_diffusion.nemo")   # or a step-<N> folder

How the seed's (LDM) keys map onto the library classes:
- UNet: block_out_channels = model_channels x channel_mult; level i is a cross-attention block when 2**i is in
  attention_resolutions; layers_per_block = num_res_blocks; cross_attention_dim = context_dim; diffusers'
  `attention_head_dim` counts heads (its historical name): num_heads for every level, or channels / num_head_channels.
- VAE: block_out_channels = ch x ch_mult, layers_per_block = num_res_blocks, latent_channels = embed_dim.
- Schedule: LDM's `linear` betas are linear in sqrt(beta), diffusers' `scaled_linear`; `cosine` is squaredcos_cap_v2;
  parameterization eps / v is prediction_type epsilon / v_prediction.
- Text: the last hidden state, or the penultimate one through the final layer norm (SD 2.x, as OpenCLIP's
  FrozenOpenCLIPEmbedder reads it).

Without from_pretrained / pretrained, the VAE and the text encoder are initialised from their own `seed` (the tiny
configs' stand-in for real weights, identical in the precache encoders), the UNet from model.seed. A seeded VAE's
posterior is made nearly deterministic, as a trained one's is (log-variance output SEEDED_VAE_LOGVAR): at the
library's initialisation its standard deviation is 1 against a mean that varies by ~0.2 between images, so every
sampled latent would be mostly noise and a tiny model would learn nothing of the images.
"""

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...contract.schemas.stable_diffusion_model import LatentDiffusionModel
from ..common.config import JobConfigError, bind

NEMO_FILE_NAME = "nemo_stable_diffusion.nemo"
SEEDED_VAE_LOGVAR = -10.0  # posterior standard deviation exp(-5) ~ 0.007
# Prefixes of the three networks in a .nemo's state dict and in training checkpoints.
UNET, VAE, TEXT_ENCODER = "unet.", "vae.", "text_encoder."
# What a training checkpoint keeps of the model section (common state), so a step folder alone rebuilds the model.
CONFIG_STATE_KEY = "stable_diffusion_model"


@dataclasses.dataclass
class StableDiffusionParts:
    unet: Any  # diffusers UNet2DConditionModel
    vae: Any  # diffusers AutoencoderKL
    text_encoder: Any  # transformers CLIPTextModel
    tokenizer: Any  # jobs/multimodal/caption_tokenizer.py: encode(text, length) -> ids
    noise_scheduler: Any  # diffusers DDPMScheduler: the training forward process
    config: LatentDiffusionModel

    def token_ids(self, texts: list[str]) -> torch.Tensor:
        length = self.config.cond_stage_config.max_length
        return torch.tensor([self.tokenizer.encode(text, length) for text in texts], dtype=torch.long)

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        device = next(self.text_encoder.parameters()).device
        return text_context(self.text_encoder, self.token_ids(texts).to(device), self.config.cond_stage_config.layer)

    def encode_images(self, pixels: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Scaled latents sampled from the autoencoder's posterior of images in [-1, 1]."""
        posterior = self.vae.encode(pixels.to(self.vae.dtype)).latent_dist
        return posterior.sample(generator) * self.config.scale_factor

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Images in [-1, 1] (clamped) from scaled latents."""
        return self.vae.decode(latents.to(self.vae.dtype) / self.config.scale_factor).sample.clamp(-1.0, 1.0)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """All three networks' weights under the family's prefixes (what a .nemo stores)."""
        state = {}
        for prefix, network in ((UNET, self.unet), (VAE, self.vae), (TEXT_ENCODER, self.text_encoder)):
            state.update({prefix + key: value for key, value in network.state_dict().items()})
        return state


def model_section(data: Mapping[str, Any], key: str = "model") -> LatentDiffusionModel:
    """Binds the networks' keys of a model section (a training section's other keys are left out)."""
    names = {f.name for f in dataclasses.fields(LatentDiffusionModel)}
    return bind(LatentDiffusionModel, {k: v for k, v in data.items() if k in names}, key)


# ---- building ---------------------------------------------------------------------------------------


def unet_settings(unet) -> dict[str, Any]:
    """UNet2DConditionModel's constructor arguments for a UnetConfig."""
    levels = range(len(unet.channel_mult))
    attends = [2**i in unet.attention_resolutions for i in levels]
    channels = unet.block_channels()
    heads = unet.num_heads if unet.num_heads is not None else [c // unet.num_head_channels for c in channels]
    return dict(
        sample_size=unet.image_size,
        in_channels=unet.in_channels,
        out_channels=unet.out_channels,
        down_block_types=tuple("CrossAttnDownBlock2D" if a else "DownBlock2D" for a in attends),
        up_block_types=tuple("CrossAttnUpBlock2D" if a else "UpBlock2D" for a in reversed(attends)),
        block_out_channels=tuple(channels),
        layers_per_block=unet.num_res_blocks,
        cross_attention_dim=unet.context_dim,
        attention_head_dim=heads,
        transformer_layers_per_block=unet.transformer_depth,
        use_linear_projection=unet.use_linear_in_transformer,
        norm_num_groups=unet.norm_num_groups,
    )


def vae_settings(first_stage, scale_factor: float) -> dict[str, Any]:
    dd = first_stage.ddconfig
    levels = len(dd.ch_mult)
    return dict(
        in_channels=dd.in_channels,
        out_channels=dd.out_ch,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=tuple(dd.ch * m for m in dd.ch_mult),
        layers_per_block=dd.num_res_blocks,
        latent_channels=first_stage.embed_dim,
        norm_num_groups=first_stage.norm_num_groups,
        sample_size=dd.resolution,
        scaling_factor=scale_factor,
    )


@contextlib.contextmanager
def _seeded(seed: int):
    """Initialise a frozen network from its own seed without moving the run's random streams."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_unet(model: LatentDiffusionModel, load_pretrained: bool = True):
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel(**unet_settings(model.unet_config))
    if model.unet_config.use_checkpoint:
        unet.enable_gradient_checkpointing()
    source = model.unet_config.from_pretrained
    if load_pretrained and source:
        load_unet_weights(unet, source, model.unet_config.from_NeMo)
    return unet


def build_vae(first_stage, scale_factor: float, load_pretrained: bool = True):
    """The frozen AutoencoderKL of a FirstStageConfig."""
    from diffusers import AutoencoderKL

    with _seeded(first_stage.seed):
        vae = AutoencoderKL(**vae_settings(first_stage, scale_factor))
    if not first_stage.from_pretrained:
        with torch.no_grad():  # quant_conv's outputs are the posterior's mean, then its log-variance
            logvar = slice(first_stage.embed_dim, None)
            vae.quant_conv.weight[logvar].zero_()
            vae.quant_conv.bias[logvar].fill_(SEEDED_VAE_LOGVAR)
    if load_pretrained and first_stage.from_pretrained:
        vae.load_state_dict(
            _diffusers_weights(first_stage.from_pretrained, "vae", "model.first_stage_config.from_pretrained")
        )
    return vae.requires_grad_(False).eval()


# The keys cond_stage_config and transformers' CLIPTextConfig share: a text encoder built from scratch takes them
# from the section, and a stored section (stored_config) describes the encoder it holds by them.
TEXT_ENCODER_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "hidden_act")


def build_text_encoder(text, tokenizer, trainable: bool = False, load_pretrained: bool = True):
    """The CLIPTextModel of a CondStageConfig, frozen unless trainable."""
    from transformers import CLIPTextConfig, CLIPTextModel

    if text.pretrained is not None and load_pretrained:
        if not (Path(text.pretrained) / "config.json").is_file():
            raise JobConfigError(
                f"model.cond_stage_config.pretrained: {text.pretrained} is not a transformers model "
                "folder (no config.json); save the CLIP text model there with save_pretrained"
            )
        encoder = CLIPTextModel.from_pretrained(text.pretrained)
    else:
        settings = dict(
            vocab_size=tokenizer.vocab_size,
            max_position_embeddings=text.max_length,
            **{key: getattr(text, key) for key in TEXT_ENCODER_SIZES},
            pad_token_id=tokenizer.pad,
            bos_token_id=tokenizer.bos,
            eos_token_id=tokenizer.eos,
        )
        with _seeded(text.seed):
            encoder = CLIPTextModel(CLIPTextConfig(**settings))
    return encoder.requires_grad_(trainable).train(trainable)


def text_context(text_encoder, ids: torch.Tensor, layer: str) -> torch.Tensor:
    """[b, tokens, width] features the UNet cross-attends to. No attention mask, as SD: the causal mask already keeps
    the padding out of every caption token's features."""
    if layer == "last":
        return text_encoder(input_ids=ids).last_hidden_state
    hidden = text_encoder(input_ids=ids, output_hidden_states=True).hidden_states[-2]
    return text_encoder.text_model.final_layer_norm(hidden)


def noise_scheduler(model: LatentDiffusionModel):
    """The training forward process (diffusers' DDPMScheduler); samplers can be made from its config."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(
        num_train_timesteps=model.timesteps,
        beta_start=model.linear_start,
        beta_end=model.linear_end,
        beta_schedule={"linear": "scaled_linear", "cosine": "squaredcos_cap_v2"}[model.beta_schedule],
        prediction_type={"eps": "epsilon", "v": "v_prediction"}[model.parameterization],
        clip_sample=False,
    )


def build_stable_diffusion(model: LatentDiffusionModel, load_pretrained: bool = True) -> StableDiffusionParts:
    """The networks a section describes. load_pretrained false skips every from_pretrained / pretrained read (the
    weights come from a .nemo or checkpoint next)."""
    from ..multimodal.caption_tokenizer import load_clip_tokenizer

    tokenizer = load_clip_tokenizer(model.tokenizer)
    return StableDiffusionParts(
        unet=build_unet(model, load_pretrained),
        vae=build_vae(model.first_stage_config, model.scale_factor, load_pretrained),
        text_encoder=build_text_encoder(
            model.cond_stage_config, tokenizer, model.cond_stage_trainable, load_pretrained
        ),
        tokenizer=tokenizer,
        noise_scheduler=noise_scheduler(model),
        config=model,
    )


# ---- weights from elsewhere -------------------------------------------------------------------------


def _diffusers_weights(path: str, subfolder: str, key: str) -> dict[str, torch.Tensor]:
    """A diffusers model folder's state dict: <path> or <path>/<subfolder> (a pipeline folder), safetensors or .bin."""
    for folder in (Path(path), Path(path) / subfolder):
        for name in ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin"):
            if (folder / name).is_file():
                if name.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return load_file(str(folder / name))
                return torch.load(folder / name, map_location="cpu", weights_only=True)
    raise JobConfigError(
        f"{key}: {path} holds no diffusers weights (diffusion_pytorch_model.safetensors or .bin, "
        f"directly or under {subfolder}/); save the model there with save_pretrained"
    )


def load_unet_weights(unet, source: str, from_nemo: bool) -> None:
    """The UNet's weights alone, for continuing training: from one of ours (.nemo or training checkpoint) or from a
    Hugging Face diffusers folder. The other networks and the optimizer start afresh."""
    key = "model.unet_config.from_pretrained"
    if from_nemo:
        state = _our_weights(source, key)
        state = {name[len(UNET) :]: value for name, value in state.items() if name.startswith(UNET)}
    else:
        state = _diffusers_weights(source, "unet", key)
    _load_strict(unet, state, source, key)


def _load_strict(network, state: Mapping[str, torch.Tensor], source: str, key: str) -> None:
    result = network.load_state_dict(dict(state), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise JobConfigError(
            f"{key}: the weights in {source} do not fit the network the config describes (missing: "
            f"{result.missing_keys[:3]}, unexpected: {result.unexpected_keys[:3]}); check its sizes"
        )
    mismatched = [name for name, value in state.items() if network.state_dict()[name].shape != value.shape]
    if mismatched:
        raise JobConfigError(f"{key}: {source} has other shapes for {mismatched[:3]}")


def _our_weights(source: str, key: str) -> dict[str, torch.Tensor]:
    path = Path(source)
    if path.is_file():
        from ..core.nemo_archive import load_nemo

        return load_nemo(path)[1]
    if path.is_dir():
        return _checkpoint_tensors(path)[0]
    raise JobConfigError(f"{key}: {source} is neither a .nemo file nor a checkpoint folder")


def _checkpoint_tensors(folder: Path):
    """(weights under the family's prefixes, the model section saved with them) of a complete training checkpoint:
    `folder` itself, or the newest complete step-<N> in it. Joins a one-process group where none is running."""
    from megatron.core import dist_checkpointing

    from ..core.conversion import find_checkpoint
    from ..core.standalone import start_model_parallel

    checkpoint = find_checkpoint(str(folder), "latest")
    common = dist_checkpointing.load_common_state_dict(str(checkpoint))
    if CONFIG_STATE_KEY not in common:
        raise JobConfigError(f"{checkpoint}: not a stable_diffusion training checkpoint (it keeps no model section)")
    start_model_parallel(1, 1)
    metadata = dist_checkpointing.load_tensors_metadata(str(checkpoint))
    wanted = {name: entry for name, entry in metadata.items() if name.startswith((UNET, VAE, TEXT_ENCODER))}
    loaded = dist_checkpointing.load(wanted, str(checkpoint), validate_access_integrity=False)
    # The metadata lists the sharded objects (e.g. Transformer Engine's extra states) beside the tensors; weights only.
    return (
        {name: tensor.cpu() for name, tensor in loaded.items() if isinstance(tensor, torch.Tensor)},
        common[CONFIG_STATE_KEY],
    )


def load_stable_diffusion(path, device: str = "cpu") -> StableDiffusionParts:
    """Every network of a .nemo that training wrote, or of a training checkpoint (a step-<N> folder, or the folder
    holding them: the newest complete one), in eval mode and frozen."""
    path = Path(path)
    if path.is_file():
        from ..core.nemo_archive import load_nemo

        config, state = load_nemo(path)
    elif path.is_dir():
        state, config = _checkpoint_tensors(path)
    else:
        raise JobConfigError(f"model.restore_from_path: {path} is neither a .nemo file nor a checkpoint folder")
    model = model_section(config, "model")
    parts = build_stable_diffusion(dataclasses.replace(model, cond_stage_trainable=False), load_pretrained=False)
    for prefix, network in ((UNET, parts.unet), (VAE, parts.vae), (TEXT_ENCODER, parts.text_encoder)):
        _load_strict(
            network,
            {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)},
            str(path),
            "model.restore_from_path",
        )
        network.to(device).eval().requires_grad_(False)
    return parts


def stored_config(model: LatentDiffusionModel, text_encoder) -> dict[str, Any]:
    """The section a .nemo or checkpoint keeps: the weights travel with it, so nothing is read from the pretrained
    folders again (they need not exist where the file is used) and the text encoder is described by its sizes."""
    section = {f.name: dataclasses.asdict(model)[f.name] for f in dataclasses.fields(LatentDiffusionModel)}
    section["unet_config"]["from_pretrained"] = None
    section["first_stage_config"]["from_pretrained"] = None
    text = text_encoder.config
    section["cond_stage_config"].update(pretrained=None, **{key: getattr(text, key) for key in TEXT_ENCODER_SIZES})
    return section


def save_stable_diffusion(
    path, parts: StableDiffusionParts, replaced: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """Writes the .nemo that load_stable_diffusion (and every later stage) reads: the model section, the weights of
    the three networks (those named in `replaced`, e.g. an average of the trained ones, from there), the tokenizer's
    files."""
    from ..core.nemo_archive import save_nemo

    state = {key: value.detach().cpu() for key, value in parts.state_dict().items()}
    state.update({key: value.detach().cpu().to(state[key].dtype) for key, value in (replaced or {}).items()})
    return save_nemo(path, stored_config(parts.config, parts.text_encoder), state)
