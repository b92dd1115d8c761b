"""Stable Diffusion / DreamBooth framework inference: `python3 -m nemo_launcher.jobs.stable_diffusion.text2img
--config <resolved fw_inference yaml>`.

For each prompt, infer.num_images_per_prompt images from the .nemo (schema: contract/schemas/sd_inference.py):
`<out_path>/images/<prompt>_<image>.png`, with infer.combine_images a `grid_<prompt>.png`, and `text2img.json`
(prompts, settings, files). With class_reference_dir, each prompt that names a class (a folder name, underscores as
spaces) is scored by its images' nearest class-mean image (mean squared pixel difference), as DiT's samples are.
"""
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

from ...contract.schemas.sd_inference import TEXT2IMG_RESULTS, Text2ImgConfig
from .inference import output_folder, run_program


def class_folder_means(root: str, height: int, width: int) -> Dict[str, object]:
    """{class name: mean image [3, H, W] in [0, 1]} of the class folders under root (<class>/*.png|jpg)."""
    import numpy as np
    import torch
    from PIL import Image

    means = {}
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        files = sorted(f for f in folder.iterdir() if f.suffix.lower() in (".png", ".jpg", ".jpeg"))
        if not files:
            continue
        stack = [np.asarray(Image.open(f).convert("RGB").resize((width, height), Image.BICUBIC), dtype=np.float32) / 255
                 for f in files]
        means[folder.name.replace("_", " ")] = torch.from_numpy(np.mean(stack, axis=0)).permute(2, 0, 1)
    return means


def named_class(prompt: str, classes: List[str]) -> Optional[str]:
    """The one class a prompt names (the longest match), or None."""
    found = sorted((c for c in classes if c in prompt.lower()), key=len, reverse=True)
    return found[0] if found else None


def generate(cfg: Text2ImgConfig, parts):
    import torch

    from ..common.config import JobConfigError
    from ..common.report import Summary
    from .sampling import Sampling, save_png, text_to_images, tile, vae_factor

    infer = cfg.infer
    if vae_factor(parts) != infer.down_factor:
        raise JobConfigError(f"fw_inference.infer.down_factor={infer.down_factor}: the model's VAE scales by "
                             f"{vae_factor(parts)}; set {vae_factor(parts)}")
    output = output_folder(infer.out_path)
    images_dir = output_folder(str(output / "images"))
    sampling = Sampling(infer.inference_steps, infer.sampler_type, infer.eta)
    files, samples = [], []
    for p, prompt in enumerate(infer.prompts):
        generator = torch.Generator().manual_seed(infer.seed + p)
        images = text_to_images(parts, [prompt], sampling, infer.unconditional_guidance_scale,
                                infer.num_images_per_prompt, infer.height, infer.width, generator)
        samples.append(images)
        for i, image in enumerate(images):
            save_png(image, images_dir / f"{p:02d}_{i:02d}.png")
            files.append(f"images/{p:02d}_{i:02d}.png")
        if infer.combine_images:
            save_png(tile(images, *infer.combine_images), output / f"grid_{p:02d}.png")
            files.append(f"grid_{p:02d}.png")
    report = {"model": cfg.model.restore_from_path, "prompts": infer.prompts, "sampler_type": infer.sampler_type,
              "inference_steps": infer.inference_steps, "unconditional_guidance_scale": infer.unconditional_guidance_scale,
              "seed": infer.seed, "height": infer.height, "width": infer.width, "images": files}
    summary = Summary(f"text2img finished: {len(infer.prompts) * infer.num_images_per_prompt} images of "
                      f"{len(infer.prompts)} prompts")
    if cfg.class_reference_dir:
        from ..dit.sample import nearest_class_scores

        means = class_folder_means(cfg.class_reference_dir, infer.height, infer.width)
        classes = [named_class(prompt, list(means)) for prompt in infer.prompts]
        scored = [(c, s) for c, s in zip(classes, samples) if c is not None]
        scores = nearest_class_scores(torch.stack([s for _, s in scored]) if scored else torch.zeros(0),
                                      [c for c, _ in scored], means)
        report["class_scores"] = {**scores, "metric": "mean squared pixel difference to each class's mean image"}
        if scores["accuracy"] is not None:
            summary.add("nearest class", f"{100 * scores['accuracy']:.0f}% of images closest to their prompt's class "
                                         f"mean (chance {100 * scores['chance']:.0f}%)")
    (output / TEXT2IMG_RESULTS).write_text(json.dumps(report, indent=1))
    summary.add("images", f"{images_dir} ({len(infer.prompts) * infer.num_images_per_prompt} PNG)")
    summary.add("results", output / TEXT2IMG_RESULTS)
    return summary


def main(argv=None) -> int:
    return run_program("text2img", Text2ImgConfig, generate, argv)


if __name__ == "__main__":
    sys.exit(main())
