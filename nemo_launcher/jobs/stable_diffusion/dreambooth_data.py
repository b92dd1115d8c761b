"""DreamBooth's training examples: the subject's photos with the instance prompt and, with prior preservation, class
images with the class prompt, drawn first from the starting .nemo where the class folder holds fewer than asked.

    fill_regularization(cfg)        # rank 0 before the datasets: <regularization_dir>/generated_<n>.png
    dataset[n] -> {"image", "text": instance photo n mod count and the instance prompt's ids,
                   "prior_image", "prior_text": class image n mod count and the class prompt's ids (with prior
                   preservation), "sample": n}

recipe.py's forward step puts the class examples after the instance ones and adds their loss times
prior_loss_weight. Class image n is drawn from reg_generation.seed + its batch's first n, and written atomically, so
an interrupted generation resumes with the same images.
"""

import os
from pathlib import Path

import numpy as np
import torch

from ..common.config import JobConfigError
from .data import image_pixels

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def image_files(folder) -> list[Path]:
    """The image files directly in `folder`, sorted (hidden ones, e.g. half-written, left out)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))


def fill_regularization(cfg) -> int:
    """Draws class images from model.restore_from_path until regularization_dir holds num_reg_images; returns how
    many it drew. The run's random streams are left as they were."""
    from .model import load_stable_diffusion
    from .sampling import Sampling, save_png, text_to_images

    data = cfg.model.data
    folder = Path(data.regularization_dir)
    folder.mkdir(parents=True, exist_ok=True)
    have = len(image_files(folder))
    if have >= data.num_reg_images:
        return 0
    device = "cuda" if torch.cuda.is_available() and cfg.trainer.accelerator == "gpu" else "cpu"
    g = data.reg_generation
    sampling = Sampling(steps=g.inference_steps, sampler=g.sampler_type)
    # Building the networks draws initial weights from the default generator too: a run that draws class images
    # must go on with the same random streams as one that finds them drawn.
    with torch.random.fork_rng(devices=[]):
        parts = load_stable_diffusion(cfg.model.restore_from_path, device=device)
        for first in range(have, data.num_reg_images, data.num_images_per_prompt):
            count = min(data.num_images_per_prompt, data.num_reg_images - first)
            generator = torch.Generator().manual_seed(g.seed + first)
            images = text_to_images(
                parts,
                [data.regularization_prompt],
                sampling,
                g.unconditional_guidance_scale,
                count,
                data.resolution,
                data.resolution,
                generator,
            )
            for offset, image in enumerate(images):
                name = f"generated_{first + offset:05d}.png"
                temporary = folder / f".{name}.{os.getpid()}.png"
                save_png(image, temporary)
                os.replace(temporary, folder / name)
    return data.num_reg_images - have


def _pixels(path: Path, side: int, center_crop: bool) -> torch.Tensor:
    from PIL import Image

    try:
        with Image.open(path) as opened:
            image = opened.convert("RGB")
    except OSError as error:
        raise JobConfigError(f"model.data: cannot read {path} ({error})") from None
    if center_crop:
        return torch.from_numpy(image_pixels(image, side))
    squeezed = np.asarray(image.resize((side, side), Image.BICUBIC), dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(np.ascontiguousarray(squeezed.transpose(2, 0, 1)))


class DreamBoothExamples(torch.utils.data.Dataset):
    def __init__(self, cfg, tokenizer, length: int):
        m, data = cfg.model, cfg.model.data
        self.length, self.side, self.crop = length, data.resolution, data.center_crop
        self.instances = image_files(data.instance_dir)
        if not self.instances:
            raise JobConfigError(
                f"model.data.instance_dir={data.instance_dir!r}: no images in it; put the subject's "
                f"photos there ({', '.join(IMAGE_SUFFIXES)})"
            )

        def ids(text):
            return torch.tensor(tokenizer.encode(text, m.cond_stage_config.max_length), dtype=torch.long)

        self.instance_ids = ids(data.instance_prompt)
        self.classes = image_files(data.regularization_dir)[: data.num_reg_images] if m.with_prior_preservation else []
        self.class_ids = ids(data.regularization_prompt) if self.classes else None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, sample: int):
        item = {
            "image": _pixels(self.instances[sample % len(self.instances)], self.side, self.crop),
            "text": self.instance_ids,
            "sample": torch.tensor(sample),
        }
        if self.classes:
            item.update(
                prior_image=_pixels(self.classes[sample % len(self.classes)], self.side, self.crop),
                prior_text=self.class_ids,
            )
        return item


def datasets(cfg, tokenizer, sizes):
    """(train, None, None); rank 0 first fills the class folder, the other ranks wait for it."""
    if cfg.model.with_prior_preservation:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if not distributed or torch.distributed.get_rank() == 0:
            fill_regularization(cfg)
        if distributed:
            torch.distributed.barrier()
    return DreamBoothExamples(cfg, tokenizer, sizes[0]), None, None


def describe(cfg, train, valid) -> str:
    data = cfg.model.data
    text = f"DreamBooth: {len(train.instances)} instance images ({data.instance_prompt!r})"
    if train.classes:
        text += (
            f", {len(train.classes)} class images ({data.regularization_prompt!r}, "
            f"loss x {cfg.model.prior_loss_weight})"
        )
    return text
