"""InstructPix2Pix framework inference: `python3 -m nemo_launcher.jobs.stable_diffusion.edit_cli --config
<resolved fw_inference yaml>`.

edit.num_images_per_prompt edits of edit.input by edit.prompt (schema: contract/schemas/sd_inference.py), the
input scaled so its longer side is edit.resolution: `<outpath>/edit_<n>.png`, with edit.combine_images [rows, cols]
a `grid.png`, and `edit.json`.
"""

import sys

from ...contract.schemas.sd_inference import EDIT_RESULTS, EditConfig
from .inference import output_folder, run_program, write_results


def edit(cfg: EditConfig, parts):
    import torch
    from PIL import Image

    from ..common.config import JobConfigError
    from ..common.report import Summary
    from .sampling import edit_image, image_to_pixels, resize_for_edit, save_png, size_multiple, tile

    settings = cfg.edit
    if parts.unet.config.in_channels != 2 * parts.config.channels:
        raise JobConfigError(
            f"fw_inference.model.restore_from_path={cfg.model.restore_from_path}: its UNet reads "
            f"{parts.unet.config.in_channels} channels, not an InstructPix2Pix UNet's "
            f"{2 * parts.config.channels}; give an instruct_pix2pix training's .nemo"
        )
    try:
        with Image.open(settings.input) as source:
            image = resize_for_edit(source, settings.resolution, size_multiple(parts))
    except OSError as error:
        raise JobConfigError(f"fw_inference.edit.input={settings.input!r}: cannot read the image ({error})") from None
    output = output_folder(settings.outpath)
    generator = torch.Generator().manual_seed(settings.seed)
    images = edit_image(
        parts,
        image_to_pixels(image),
        settings.prompt,
        settings.steps,
        settings.cfg_text,
        settings.cfg_image,
        settings.num_images_per_prompt,
        generator,
    )
    files = []
    for n, picture in enumerate(images):
        save_png(picture, output / f"edit_{n:02d}.png")
        files.append(f"edit_{n:02d}.png")
    if settings.combine_images:
        save_png(tile(images, *settings.combine_images), output / "grid.png")
        files.append("grid.png")
    report = {
        "model": cfg.model.restore_from_path,
        "input": settings.input,
        "prompt": settings.prompt,
        "size": list(image.size),
        "steps": settings.steps,
        "cfg_text": settings.cfg_text,
        "cfg_image": settings.cfg_image,
        "seed": settings.seed,
        "images": files,
    }
    summary = Summary(f"edit finished: {len(images)} edits of {settings.input} by {settings.prompt!r}")
    return write_results(summary, output, EDIT_RESULTS, report, f"{output} ({len(files)} PNG)")


def main(argv=None) -> int:
    return run_program("edit_cli", EditConfig, edit, argv)


if __name__ == "__main__":
    sys.exit(main())
