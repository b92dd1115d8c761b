"""Image preprocessing with PIL and numpy (torchvision does not import here: shared/notes/vision-diffusion-deps.md).

    pixels = training_pixels(decode(data), 224, 224, rng, scale=(0.08, 1.0), flip=True, mean=..., std=...)
    pixels = evaluation_pixels(decode(data), 224, 224, mean=..., std=...)      # [3, H, W] float32

Training: a random crop of `scale` of the area with an aspect ratio in [3/4, 4/3] (Inception's crop, as
torchvision's RandomResizedCrop), resized to H x W, mirrored half of the time. Evaluation: the shorter side
resized to the target, the centre cut out. Pixels are scaled to [0, 1], then normalised per channel.
"""

import io
import math
from collections.abc import Sequence

import numpy as np

_ATTEMPTS = 10  # random crops tried before falling back to the centre crop


def decode(data):
    """An RGB image from encoded bytes or a file path."""
    from PIL import Image

    image = Image.open(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data)
    return image.convert("RGB")


def _normalised(image, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32) / 255.0
    array = (array - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def _crop_box(width: int, height: int, rng: np.random.Generator, scale: tuple[float, float]):
    area = width * height
    for _ in range(_ATTEMPTS):
        target = area * rng.uniform(scale[0], scale[1])
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def training_pixels(
    image, height: int, width: int, rng: np.random.Generator, scale: tuple[float, float], flip: bool, mean, std
) -> np.ndarray:
    from PIL import Image

    box = _crop_box(image.width, image.height, rng, scale)
    mirrored = flip and rng.random() < 0.5
    image = image.resize((width, height), Image.BICUBIC, box=box)
    if mirrored:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return _normalised(image, mean, std)


def evaluation_pixels(image, height: int, width: int, mean, std) -> np.ndarray:
    from PIL import Image

    factor = max(height / image.height, width / image.width)
    size = (max(width, round(image.width * factor)), max(height, round(image.height * factor)))
    image = image.resize(size, Image.BICUBIC)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    return _normalised(image.crop((left, top, left + width, top + height)), mean, std)


def sample_rng(seed: int, sample: int) -> np.random.Generator:
    """The random stream of one sample of the run: any process, any resume, draws the same crop for it."""
    return np.random.default_rng([seed, sample])
