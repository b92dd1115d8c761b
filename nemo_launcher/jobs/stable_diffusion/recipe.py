"""Stable Diffusion on the trainer core: the latent-diffusion loss, WebDataset data, EMA weights, the .nemo at the end.

    run_program(argv, prog, StableDiffusionTrainingConfig, sd_recipe, build=build_sd_parts, module_class=SdModule)

One step: latents (the VAE's posterior sample of the image, or of its precached mean and log-variance) are noised at
a random step of the DDPM schedule, the UNet predicts the noise (or the velocity) from them, the timestep and the
caption's CLIP features, and the squared error is the loss. With text_embedding_dropout_rate, that share of samples
is trained on the empty caption's features, the unconditional input classifier-free guidance contrasts with.
Only the UNet trains (and the text encoder where cond_stage_trainable says so); the VAE stays frozen.

Noise, timesteps and dropped captions come from the default random generators, whose states every checkpoint saves,
so a resumed run draws what an uninterrupted one would; validation draws them from the samples' numbers, so every
validation scores the same noised samples. Sample n of the run is the same example in any process (data.py).
"""

import dataclasses
import functools

import torch

from ..core.recipe import Recipe, Sequences
from ..core.weight_average import AveragingModule
from .data import describe, sd_datasets, train_examples
from .model import CONFIG_STATE_KEY, build_stable_diffusion, stored_config, text_context

LOSS = "diffusion loss"
PRIOR_LOSS = "prior loss"  # DreamBooth's class examples alone (part of LOSS, weighted)


def transformer_config(model, precision: str, on_gpu: bool, use_te: bool):
    """What megatron's precision wrapper, DDP and optimizer read; SD's networks are diffusers', not megatron layers."""
    from megatron.core.transformer import TransformerConfig

    from ..core.transformer import DTYPES

    dtype = DTYPES[precision]
    return TransformerConfig(
        num_layers=1,
        hidden_size=model.unet_config.model_channels,
        num_attention_heads=1,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu_initialization=model.use_cpu_initialization,
    )


def _latent_diffusion_class():
    from megatron.core.transformer.module import MegatronModule

    class LatentDiffusion(MegatronModule):
        """The three networks as one megatron module (its sharded state dict saves them under unet., vae.,
        text_encoder.); forward returns each sample's squared error."""

        def __init__(self, config, model):
            from megatron.core.enums import ModelType

            super().__init__(config)
            self.model_type = ModelType.encoder_or_decoder  # what megatron-core's schedules ask a model
            parts = build_stable_diffusion(model)
            self.unet, self.vae, self.text_encoder = parts.unet, parts.vae, parts.text_encoder
            self.scheduler, self.model_cfg = parts.noise_scheduler, model
            empty = torch.tensor([parts.tokenizer.encode("", model.cond_stage_config.max_length)], dtype=torch.long)
            self.register_buffer("empty_ids", empty, persistent=False)

        def set_input_tensor(self, input_tensor) -> None:
            """One pipeline stage: nothing arrives from another."""

        def _latents(self, image: torch.Tensor) -> torch.Tensor:
            from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

            if image.shape[1] == 2 * self.model_cfg.channels:  # a precached posterior: mean and log-variance
                posterior = DiagonalGaussianDistribution(image.to(self.vae.dtype))
            else:
                with torch.no_grad():
                    posterior = self.vae.encode(image.to(self.vae.dtype)).latent_dist
            latents = posterior.sample() if self.training else posterior.mode()
            return latents * self.model_cfg.scale_factor

        def _context(self, text: torch.Tensor) -> torch.Tensor:
            if text.is_floating_point():  # precached embeddings
                return text
            with torch.set_grad_enabled(self.model_cfg.cond_stage_trainable and torch.is_grad_enabled()):
                return text_context(self.text_encoder, text, self.model_cfg.cond_stage_config.layer)

        def _source_latents(self, source: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            # InstructPix2Pix conditions on the posterior's mode, unscaled, as its authors' model (and sampling.py's
            # edit) reads the input image; a dropped input is all zeros.
            with torch.no_grad():
                latents = self.vae.encode(source.to(self.vae.dtype)).latent_dist.mode()
            return latents * keep[:, None, None, None].to(latents.dtype)

        def forward(self, image, text, noise, timesteps, keep_text, source=None, keep_source=None):
            """`source` (InstructPix2Pix): the input images whose latents the UNet reads beside the noisy ones."""
            latents = self._latents(image)
            context = self._context(text)
            if not bool(keep_text.all()):
                empty = self._context(self.empty_ids).to(context.dtype)
                context = torch.where(keep_text[:, None, None], context, empty.expand_as(context))
            noisy = self.scheduler.add_noise(latents, noise.to(latents.dtype), timesteps)
            if source is not None:
                noisy = torch.cat([noisy, self._source_latents(source, keep_source).to(noisy.dtype)], dim=1)
            prediction = self.unet(noisy, timesteps, encoder_hidden_states=context.to(noisy.dtype)).sample
            if self.model_cfg.parameterization == "eps":
                target = noise
            else:
                target = self.scheduler.get_velocity(latents.float(), noise.float(), timesteps)
            return (prediction.float() - target.float()).pow(2).mean(dim=(1, 2, 3))

    return LatentDiffusion


def sd_chunk(model, config, vocab_size: int, use_te: bool, stage):
    return _latent_diffusion_class()(config, model)


def sd_forward_step(data_iterator, model, model_cfg):
    batch = next(data_iterator)
    prior_weight = None
    if "prior_image" in batch:  # DreamBooth's class examples, after the instance ones
        prior_weight = model_cfg.prior_loss_weight
        batch = {
            "image": torch.cat([batch["image"], batch["prior_image"]]),
            "text": torch.cat([batch["text"], batch["prior_text"]]),
            "sample": torch.cat([batch["sample"]] * 2),
        }
    image = batch["image"]
    b, side = image.shape[0], model_cfg.image_size
    generator = None
    if not model.training:
        generator = torch.Generator(device=image.device).manual_seed(int(batch["sample"][0]) + model_cfg.seed)
    device = image.device if generator is None else generator.device
    timesteps = torch.randint(0, model_cfg.timesteps, (b,), generator=generator, device=device).to(image.device)
    noise = torch.randn((b, model_cfg.channels, side, side), generator=generator, device=device).to(image.device)
    keep = torch.ones(b, dtype=torch.bool, device=image.device)
    if model.training and model_cfg.text_embedding_dropout_rate > 0:
        keep = torch.rand(b, device=image.device) >= model_cfg.text_embedding_dropout_rate
    if "source" not in batch:
        return model(image, batch["text"], noise, timesteps, keep), functools.partial(_loss, prior_weight=prior_weight)
    keep_source = torch.ones(b, dtype=torch.bool, device=image.device)
    rate = model_cfg.conditioning_dropout_rate
    if model.training and rate > 0:
        # The InstructPix2Pix authors' split of one draw: [0, r) loses the instruction, [r, 2r) both, [2r, 3r) the
        # input image; guidance then contrasts each condition with its absence.
        draw = torch.rand(b, device=image.device)
        keep = draw >= 2 * rate
        keep_source = (draw < rate) | (draw >= 3 * rate)
    return model(image, batch["text"], noise, timesteps, keep, batch["source"], keep_source), _loss


def _loss(per_sample, prior_weight=None):
    if prior_weight is None:
        loss = per_sample.mean()
        # The schedule divides the returned loss by the number of microbatches in place; report a copy.
        return loss, {LOSS: loss.detach().clone()}
    instance, prior = per_sample.chunk(2)
    loss = instance.mean() + prior_weight * prior.mean()
    return loss, {LOSS: loss.detach().clone(), PRIOR_LOSS: prior.mean().detach()}


def _sequences(model) -> Sequences:
    # Throughput counts latent pixels: what the UNet's cost grows with.
    return Sequences(model.image_size * model.image_size)


def _summary_items(cfg, outcome):
    m, ema = cfg.model, cfg.exp_manager.ema
    u = m.unet_config
    return [
        (
            "model",
            f"latent diffusion: UNet {u.model_channels} x {u.channel_mult} channels on {m.channels}x"
            f"{m.image_size}x{m.image_size} latents, {m.parameterization} prediction, text dropout "
            f"{m.text_embedding_dropout_rate}",
        ),
        ("EMA", f"decay {ema.decay} every {ema.every_n_steps} steps (written into the .nemo)" if ema.enable else None),
    ]


def sd_recipe(cfg) -> Recipe:
    return Recipe(
        megatron_modules=("megatron.core.transformer.module",),
        transformer_config=transformer_config,
        build_chunk=sd_chunk,
        build_datasets=None,
        forward_step=functools.partial(sd_forward_step, model_cfg=cfg.model),
        loss_names=(LOSS, PRIOR_LOSS) if getattr(cfg.model, "with_prior_preservation", False) else (LOSS,),
        sequences=_sequences,
        summary_items=_summary_items,
        epoch_samples=train_examples,
    )


def build_sd_parts(
    recipe: Recipe, cfg, placement, on_gpu: bool, resume=None, datasets_for=sd_datasets, description=describe
):
    """The core's parts around the networks (UNet from model.seed or unet_config.from_pretrained; a checkpoint's
    weights are loaded later by the strategy) over the WebDataset shards, or what datasets_for(cfg, tokenizer,
    [train, validation, test] sizes) gives (the fine-tunes' data), described by description(cfg, train, valid)."""
    from ..core.datasets import dataset_sizes
    from ..core.parts import assemble_parts
    from ..core.transformer import build_chunks
    from ..multimodal.caption_tokenizer import load_clip_tokenizer

    config = recipe.transformer_config(cfg.model, cfg.trainer.precision_name(), on_gpu, False)
    chunks = build_chunks(recipe.build_chunk, cfg.model, config, 0, False)
    tokenizer = load_clip_tokenizer(cfg.model.tokenizer)
    built = {}

    def datasets(batches):
        built["splits"] = datasets_for(cfg, tokenizer, dataset_sizes(cfg, batches))
        return built["splits"]

    parts = assemble_parts(recipe, cfg, placement, on_gpu, False, None, 0, config, chunks, datasets)
    train, valid, _ = built["splits"]
    return dataclasses.replace(parts, data_description=description(cfg, train, valid))


class SdModule(AveragingModule):
    """The core's module with the EMA weights of exp_manager.ema (core/weight_average.py: the UNet's trained
    parameters), the model section in every checkpoint (load_stable_diffusion rebuilds the networks from a step
    folder alone), and the .nemo at the end."""

    def sharded_extra_state(self):
        state = super().sharded_extra_state()
        chunk = self.parts.bare_chunks[0]
        state[CONFIG_STATE_KEY] = stored_config(self.parts.cfg.model, chunk.text_encoder)
        return state

    def write_outputs(self):
        """Rank 0 writes the family's .nemo (cfg.nemo_path()) beside the checkpoints (the EMA weights where EMA is
        on)."""
        from pathlib import Path

        from .model import StableDiffusionParts, save_stable_diffusion

        cfg = self.parts.cfg
        path = Path(cfg.nemo_path())
        if self.parts.placement.rank != 0:
            return {".nemo": str(path)}
        chunk = self.parts.bare_chunks[0]
        # Only what trained is averaged into the file: the frozen networks keep their weights bit for bit.
        averaged = {}
        if self.average is not None:
            averaged = dict(self.average.shadow[0])
        parts = StableDiffusionParts(chunk.unet, chunk.vae, chunk.text_encoder, None, chunk.scheduler, cfg.model)
        save_stable_diffusion(path, parts, averaged)
        return {".nemo": str(path)}
