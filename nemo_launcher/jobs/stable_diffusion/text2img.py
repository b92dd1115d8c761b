"""Stable Diffusion / DreamBooth framework inference: `python3 -m nemo_launcher.jobs.stable_diffusion.text2img
--config <resolved fw_inference yaml>`.

For each prompt, infer.num_images_per_prompt images from the .nemo (schema: contract/schemas/sd_inference.py):
`<out_path>/images/<prompt>_<image>.png`, with infer.combine_images a `grid_<prompt>.png`, and `text2img.json`
(prompts, settings, files). With class_reference_dir, each prompt that names a class (a folder name, underscores as
spaces) is scored by the nearest class mean, as DiT's samples are: in the model's latent space (the sampled latents
against the mean VAE latent of each class's reference images: what the UNet learned, whatever the VAE) and in pixels
(the decoded images against each class's mean image: meaningful only with a trained VAE; the tiny configs' VAE is
random, so its decoder draws no shapes).
"""

import sys
from pathlib import Path

from ...contract.schemas.sd_inference import TEXT2IMG_RESULTS, Text2ImgConfig
from .inference import output_folder, run_program, write_results


def class_folder_means(root: str, height: int, width: int, encode=None) -> dict[str, object]:
    """{class name: mean image [3, H, W] in [0, 1]} of the class folders under root (<class>/*.png|jpg); with
    `encode` (pixels [n, 3, H, W] in [-1, 1] -> latents), the mean of the encoded images instead."""
    import numpy as np
    import torch
    from PIL import Image

    means = {}
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        files = sorted(f for f in folder.iterdir() if f.suffix.lower() in (".png", ".jpg", ".jpeg"))
        if not files:
            continue
        stack = [
            np.asarray(Image.open(f).convert("RGB").resize((width, height), Image.BICUBIC), dtype=np.float32) / 255
            for f in files
        ]
        pixels = torch.from_numpy(np.stack(stack)).permute(0, 3, 1, 2)
        means[folder.name.replace("_", " ")] = (pixels if encode is None else encode(pixels * 2 - 1)).mean(0)
    return means


def reference_latents(parts):
    """pixels [n, 3, H, W] in [-1, 1] -> the scaled latents of the VAE posterior's mode (what sampling aims at)."""
    import torch

    def encode(pixels):
        with torch.no_grad():
            posterior = parts.vae.encode(pixels.to(next(parts.vae.parameters()).device, parts.vae.dtype)).latent_dist
        return (posterior.mode() * parts.config.scale_factor).float().cpu()

    return encode


def class_scores(root: str, height: int, width: int, parts, prompts: list[str], latents, images) -> dict:
    """Nearest-class-mean scores of each prompt naming a class, in latent space and in pixels."""
    import torch

    from ..multimodal.latent_classes import nearest_class_scores

    scores = {}
    for space, samples, encode in (("latent", latents, reference_latents(parts)), ("pixel", images, None)):
        means = class_folder_means(root, height, width, encode)
        classes = [named_class(prompt, list(means)) for prompt in prompts]
        scored = [(c, s.float().cpu()) for c, s in zip(classes, samples) if c is not None]
        scores[space] = nearest_class_scores(
            torch.stack([s for _, s in scored]) if scored else torch.zeros(0), [c for c, _ in scored], means
        )
    scores["latent"]["metric"] = (
        "mean squared difference of each sampled latent to the mean VAE latent (posterior "
        "mode) of each class's reference images; the nearest mean is the predicted class"
    )
    scores["pixel"]["metric"] = "mean squared pixel difference of each decoded image to each class's mean image"
    return scores


def named_class(prompt: str, classes: list[str]) -> str | None:
    """The one class a prompt names (the longest match), or None."""
    found = sorted((c for c in classes if c in prompt.lower()), key=len, reverse=True)
    return found[0] if found else None


def generate(cfg: Text2ImgConfig, parts):
    import torch

    from ..common.config import JobConfigError
    from ..common.report import Summary
    from .sampling import Sampling, decode_to_unit, save_png, text_to_latents, tile, vae_factor

    infer = cfg.infer
    if vae_factor(parts) != infer.down_factor:
        raise JobConfigError(
            f"fw_inference.infer.down_factor={infer.down_factor}: the model's VAE scales by "
            f"{vae_factor(parts)}; set {vae_factor(parts)}"
        )
    output = output_folder(infer.out_path)
    images_dir = output_folder(str(output / "images"))
    sampling = Sampling(infer.inference_steps, infer.sampler_type, infer.eta)
    files, samples, sampled_latents = [], [], []
    for p, prompt in enumerate(infer.prompts):
        generator = torch.Generator().manual_seed(infer.seed + p)
        latents = text_to_latents(
            parts,
            [prompt],
            sampling,
            infer.unconditional_guidance_scale,
            infer.num_images_per_prompt,
            infer.height,
            infer.width,
            generator,
        )
        images = decode_to_unit(parts, latents)
        samples.append(images)
        sampled_latents.append(latents)
        for i, image in enumerate(images):
            save_png(image, images_dir / f"{p:02d}_{i:02d}.png")
            files.append(f"images/{p:02d}_{i:02d}.png")
        if infer.combine_images:
            save_png(tile(images, *infer.combine_images), output / f"grid_{p:02d}.png")
            files.append(f"grid_{p:02d}.png")
    report = {
        "model": cfg.model.restore_from_path,
        "prompts": infer.prompts,
        "sampler_type": infer.sampler_type,
        "inference_steps": infer.inference_steps,
        "unconditional_guidance_scale": infer.unconditional_guidance_scale,
        "seed": infer.seed,
        "height": infer.height,
        "width": infer.width,
        "images": files,
    }
    summary = Summary(
        f"text2img finished: {len(infer.prompts) * infer.num_images_per_prompt} images of {len(infer.prompts)} prompts"
    )
    if cfg.class_reference_dir:
        scores = class_scores(
            cfg.class_reference_dir, infer.height, infer.width, parts, infer.prompts, sampled_latents, samples
        )
        report["class_scores"] = scores
        for space, what in (
            ("latent", "latents nearest their prompt's class mean latent"),
            ("pixel", "images nearest their prompt's class mean image"),
        ):
            if scores[space]["accuracy"] is not None:
                summary.add(
                    f"nearest class ({space})",
                    f"{100 * scores[space]['accuracy']:.0f}% of {what} (chance {100 * scores[space]['chance']:.0f}%)",
                )
    images = f"{images_dir} ({len(infer.prompts) * infer.num_images_per_prompt} PNG)"
    return write_results(summary, output, TEXT2IMG_RESULTS, report, images)


def main(argv=None) -> int:
    return run_program("text2img", Text2ImgConfig, generate, argv)


if __name__ == "__main__":
    sys.exit(main())
