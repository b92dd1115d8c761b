"""Sampling from Stable Diffusion's parts: text -> images, and InstructPix2Pix's instruction edit of an image.

    parts = load_stable_diffusion(".../nemo_stable_diffusion.nemo")
    images = text_to_images(parts, ["a red circle"], Sampling(steps=50, sampler="PLMS"), guidance_scale=7.5,
                            images_per_prompt=4, height=512, width=512, generator=torch.Generator().manual_seed(123))
    # [4, 3, 512, 512] in [0, 1], prompt-major (all images of the first prompt first)
    edited = edit_image(parts, pixels, "make it blue", steps=100, cfg_text=7.5, cfg_image=1.2, images=8, generator=g)

Our own loop over the library parts (diffusers' UNet, VAE and schedulers, our tokenizer and text encoder), so it runs
whatever tokenizer and text encoder a checkpoint carries. The sampler names are the seed's (`sampler_type`): PLMS
(diffusers' PNDM without Runge-Kutta warm-up steps, i.e. pseudo linear multistep), DDIM (eta > 0 adds noise), DPM
(DPM-Solver++ multistep), Euler; every scheduler is built from the training schedule's own config. Classifier-free
guidance pairs each prompt with the empty prompt: out = uncond + scale x (cond - uncond); a scale of 1 skips the
unconditional pass. InstructPix2Pix guides by text and by image at once, as its authors' CFGDenoiser does.
"""

import dataclasses
import inspect

import torch

SAMPLERS = ("PLMS", "DDIM", "DPM", "Euler")


@dataclasses.dataclass(frozen=True)
class Sampling:
    steps: int = 50
    sampler: str = "PLMS"
    eta: float = 0.0  # DDIM's noise level (0: deterministic DDIM)


def make_scheduler(training_scheduler, sampler: str):
    """A sampling scheduler over the training forward process (same betas, prediction type, timestep count)."""
    from diffusers import (
        DDIMScheduler,
        DPMSolverMultistepScheduler,
        EulerAncestralDiscreteScheduler,
        EulerDiscreteScheduler,
        PNDMScheduler,
    )

    config = training_scheduler.config
    if sampler == "PLMS":
        return PNDMScheduler.from_config(config, skip_prk_steps=True, set_alpha_to_one=False)
    if sampler == "DDIM":
        return DDIMScheduler.from_config(config, set_alpha_to_one=False, clip_sample=False)
    if sampler == "DPM":
        return DPMSolverMultistepScheduler.from_config(config, algorithm_type="dpmsolver++")
    if sampler == "Euler":
        return EulerDiscreteScheduler.from_config(config)
    if sampler == "EulerAncestral":  # InstructPix2Pix's sampler (k-diffusion's euler_ancestral)
        return EulerAncestralDiscreteScheduler.from_config(config)
    raise ValueError(f"sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")


def vae_factor(parts) -> int:
    """Image pixels per latent pixel along a side: the VAE halves the size at every level but its last."""
    return 2 ** (len(parts.vae.config.block_out_channels) - 1)


def size_multiple(parts) -> int:
    """Image sides must be multiples of this: the VAE's factor x the UNet's own downsampling."""
    return vae_factor(parts) * 2 ** (len(parts.unet.config.block_out_channels) - 1)


def _device(parts) -> torch.device:
    return next(parts.unet.parameters()).device


def _step_options(scheduler, eta: float, generator) -> dict:
    accepted = inspect.signature(scheduler.step).parameters
    options = {"generator": generator} if "generator" in accepted else {}
    if "eta" in accepted:
        options["eta"] = eta
    return options


def _denoise(parts, scheduler, latents, sampling: Sampling, generator, predict) -> torch.Tensor:
    """The sampling loop; `predict(model input, t)` returns the guided UNet output for the batch."""
    scheduler.set_timesteps(sampling.steps)
    latents = latents * scheduler.init_noise_sigma
    options = _step_options(scheduler, sampling.eta, generator)
    for t in scheduler.timesteps:
        out = predict(scheduler.scale_model_input(latents, t), t)
        latents = scheduler.step(out, t, latents, **options).prev_sample
    return latents


def decode_to_unit(parts, latents) -> torch.Tensor:
    """Scaled latents -> images in [0, 1] on the CPU."""
    return ((parts.decode_latents(latents).float() + 1.0) / 2.0).clamp(0.0, 1.0).cpu()


@torch.no_grad()
def text_to_latents(
    parts,
    prompts: list[str],
    sampling: Sampling,
    guidance_scale: float,
    images_per_prompt: int,
    height: int,
    width: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """[len(prompts) x images_per_prompt, channels, height / f, width / f] scaled latents, prompt-major. The
    starting noise is drawn on the CPU from `generator`, so a seed gives the same images on any device."""
    factor = vae_factor(parts)
    device = _device(parts)
    texts = [prompt for prompt in prompts for _ in range(images_per_prompt)]
    context = parts.encode_text(texts)
    guided = guidance_scale != 1.0
    if guided:
        context = torch.cat([parts.encode_text([""] * len(texts)), context])
    shape = (len(texts), parts.config.channels, height // factor, width // factor)
    latents = torch.randn(shape, generator=generator).to(device, parts.unet.dtype)

    def predict(inputs, t):
        if not guided:
            return parts.unet(inputs, t, encoder_hidden_states=context).sample
        unconditional, conditional = parts.unet(
            torch.cat([inputs, inputs]), t, encoder_hidden_states=context
        ).sample.chunk(2)
        return unconditional + guidance_scale * (conditional - unconditional)

    scheduler = make_scheduler(parts.noise_scheduler, sampling.sampler)
    return _denoise(parts, scheduler, latents, sampling, generator, predict)


@torch.no_grad()
def text_to_images(parts, *request, **named) -> torch.Tensor:
    """[len(prompts) x images_per_prompt, 3, height, width] images in [0, 1], prompt-major: text_to_latents of the
    same arguments (prompts, sampling, guidance_scale, images_per_prompt, height, width, generator), decoded."""
    return decode_to_unit(parts, text_to_latents(parts, *request, **named))


def resize_for_edit(image, resolution: int, multiple: int):
    """The input image scaled so its longer side is `resolution`, each side then cut down to a multiple of
    `multiple` (at least one multiple), as InstructPix2Pix's edit script sizes its input."""
    from PIL import Image

    image = image.convert("RGB")
    scale = resolution / max(image.size)
    width, height = (max(multiple, int(side * scale) // multiple * multiple) for side in image.size)
    return image.resize((width, height), Image.LANCZOS)


def image_to_pixels(image) -> torch.Tensor:
    """A PIL image as a [1, 3, H, W] tensor in [-1, 1]."""
    import numpy as np

    array = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 127.5 - 1.0)
    return array.permute(2, 0, 1).unsqueeze(0)


@torch.no_grad()
def edit_image(
    parts,
    pixels: torch.Tensor,
    prompt: str,
    steps: int,
    cfg_text: float,
    cfg_image: float,
    images: int,
    generator: torch.Generator,
    image_latents: torch.Tensor | None = None,
) -> torch.Tensor:
    """InstructPix2Pix: `images` edits of one input image ([1, 3, H, W] in [-1, 1]) by the instruction `prompt`,
    [images, 3, H, W] in [0, 1]. The UNet reads [noisy latents, the input's latents] (8 channels); guidance mixes
    three passes: text and image, image alone, neither:
    uncond + cfg_text x (full - image only) + cfg_image x (image only - uncond)."""
    device = _device(parts)
    dtype = parts.unet.dtype
    if image_latents is None:
        image_latents = parts.vae.encode(pixels.to(device, parts.vae.dtype)).latent_dist.mode()
    condition = image_latents.to(device, dtype).expand(images, -1, -1, -1)
    text = parts.encode_text([prompt] * images)
    empty = parts.encode_text([""] * images)
    context = torch.cat([text, empty, empty])
    concat = torch.cat([condition, condition, torch.zeros_like(condition)])
    latents = torch.randn(condition.shape[:1] + (parts.config.channels,) + condition.shape[2:], generator=generator).to(
        device, dtype
    )

    def predict(inputs, t):
        batch = torch.cat([torch.cat([inputs] * 3), concat], dim=1)
        full, image_only, unconditional = parts.unet(batch, t, encoder_hidden_states=context).sample.chunk(3)
        return unconditional + cfg_text * (full - image_only) + cfg_image * (image_only - unconditional)

    scheduler = make_scheduler(parts.noise_scheduler, "EulerAncestral")
    return decode_to_unit(parts, _denoise(parts, scheduler, latents, Sampling(steps=steps), generator, predict))


def tile(images: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[rows x cols, 3, H, W] -> one [3, rows x H, cols x W] grid, row by row."""
    count, channels, height, width = images.shape
    assert count == rows * cols, (count, rows, cols)
    return (
        images.reshape(rows, cols, channels, height, width)
        .permute(2, 0, 3, 1, 4)
        .reshape(channels, rows * height, cols * width)
    )


def save_png(image: torch.Tensor, path) -> None:
    """A [3, H, W] image in [0, 1] as an 8-bit PNG."""
    from PIL import Image

    array = (image.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    Image.fromarray(array).save(path)
