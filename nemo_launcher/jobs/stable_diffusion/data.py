"""Stable Diffusion's training examples from WebDataset shards, through vision/shards.py's map-style reader (sample n
of the run is the same example in any process and after any resume; no loader state to save).

    dataset = sd_dataset(model, shards, length, train=True)
    dataset[n] -> {"image": [3, H, W] pixels in [-1, 1] | [2C, h, w] precached posterior,
                   "text": [max_length] token ids | [tokens, width] precached embedding}

Which form each takes follows model.first_stage_key / cond_stage_key: `images` and `captions` read the example's
image and .txt, anything else the precache spec's key in its .pickle.
"""

import pickle

import numpy as np
import torch

from ...contract.schemas.stable_diffusion_training import RAW_CAPTIONS, RAW_IMAGES
from ..common.config import JobConfigError
from ..vision.images import decode, sample_rng
from ..vision.shards import IMAGE_MEMBERS, ShardExamples, list_shards, precached


def image_pixels(image, side: int, crop=None, flip: bool = False) -> np.ndarray:
    """[3, H, W] float32 in [-1, 1]: the shorter side resized to `side`, the centre `crop` (H, W; default side x side)
    cut out, mirrored when asked."""
    from PIL import Image

    height, width = crop or (side, side)
    image = image.convert("RGB")
    factor = side / min(image.size)
    size = (max(width, round(image.width * factor)), max(height, round(image.height * factor)))
    image = image.resize(size, Image.BICUBIC)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    image = image.crop((left, top, left + width, top + height))
    if flip:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    array = np.asarray(image, dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(array.transpose(2, 0, 1))


class ExampleEncoder:
    """An example's members -> the sample dict above (a class: DataLoader workers get it by pickling)."""

    def __init__(self, model, tokenizer, train: bool):
        self.image_key, self.text_key = model.first_stage_key, model.cond_stage_key
        self.augmentations, self.length, self.seed = (
            model.data.augmentations,
            model.cond_stage_config.max_length,
            model.seed,
        )
        self.tokenizer, self.train = tokenizer, train

    def __call__(self, members: dict[str, bytes], sample: int) -> dict[str, torch.Tensor]:
        lowered = {key.lower(): value for key, value in members.items()}
        encodings = pickle.loads(lowered["pickle"]) if "pickle" in lowered else {}
        return {
            "image": self._image(lowered, encodings, sample),
            "text": self._text(lowered, encodings),
            "sample": torch.tensor(sample),
        }

    def _image(self, members, encodings, sample: int) -> torch.Tensor:
        if self.image_key != RAW_IMAGES:
            return torch.from_numpy(np.asarray(self._precached(encodings, self.image_key), dtype=np.float32))
        a = self.augmentations
        flip = self.train and a.horizontal_flip and sample_rng(self.seed, sample).random() < 0.5
        image = decode(next(members[k] for k in IMAGE_MEMBERS if k in members))
        return torch.from_numpy(image_pixels(image, a.resize_smallest_side, a.crop(), flip))

    def _text(self, members, encodings) -> torch.Tensor:
        if self.text_key != RAW_CAPTIONS:
            return torch.from_numpy(np.asarray(self._precached(encodings, self.text_key), dtype=np.float32))
        caption = members["txt"].decode("utf-8", "replace")
        return torch.tensor(self.tokenizer.encode(caption, self.length), dtype=torch.long)

    @staticmethod
    def _precached(encodings, key: str):
        if key not in encodings:
            raise JobConfigError(
                f"model.first_stage_key / cond_stage_key: {key!r} is not among the precached keys "
                f"{sorted(encodings)}; name the precache spec's key, or images / captions to encode on the fly"
            )
        return encodings[key]


class _Complete:
    """What an example must hold: a .pickle when anything is precached, the raw members the rest needs (a class:
    DataLoader workers get it by pickling)."""

    def __init__(self, model):
        self.raw_image, self.raw_text = model.first_stage_key == RAW_IMAGES, model.cond_stage_key == RAW_CAPTIONS

    def __call__(self, extensions) -> bool:
        if not (self.raw_image and self.raw_text) and not precached(extensions):
            return False
        if self.raw_image and not any(e in extensions for e in IMAGE_MEMBERS):
            return False
        return not self.raw_text or "txt" in extensions


def train_examples(cfg) -> int:
    """Examples in one pass over model.data.train, from the listing sd_datasets reads (wdinfo.pkl counts, or the
    complete examples of each tar): what a run sized in trainer.max_epochs derives its steps from."""
    shards = list_shards(cfg.model.data.train.dataset_path, "model.data.train.dataset_path", _Complete(cfg.model))
    return sum(s.examples for s in shards)


def sd_datasets(cfg, tokenizer, sizes):
    """(train, validation, None) sized for the run (core/datasets.dataset_sizes)."""
    m, data = cfg.model, cfg.model.data
    complete = _Complete(m)
    shards = list_shards(data.train.dataset_path, "model.data.train.dataset_path", complete)
    train = ShardExamples(shards, sizes[0], m.seed, data.shuffle, ExampleEncoder(m, tokenizer, True), complete)
    valid = None
    if data.validation is not None and cfg.trainer.limit_val_batches:
        shards = list_shards(data.validation.dataset_path, "model.data.validation.dataset_path", complete)
        total = sum(s.examples for s in shards)
        if total < m.global_batch_size:
            raise JobConfigError(
                f"model.data.validation.dataset_path: {total} examples, fewer than one global batch "
                f"({m.global_batch_size}); validation needs at least one"
            )
        valid = ShardExamples(shards, total, m.seed, False, ExampleEncoder(m, tokenizer, False), complete)
    return train, valid, None


def describe(cfg, train, valid) -> str:
    m = cfg.model
    what = (
        ("images" if m.first_stage_key == RAW_IMAGES else f"precached {m.first_stage_key}")
        + " + "
        + ("captions" if m.cond_stage_key == RAW_CAPTIONS else f"precached {m.cond_stage_key}")
    )
    text = f"WebDataset shards: {len(train.shards)} tars, {train.total} examples ({what})"
    if valid is not None:
        text += f"; validation {len(valid.shards)} tars, {valid.total} examples"
    return text
