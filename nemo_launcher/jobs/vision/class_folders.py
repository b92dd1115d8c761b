"""ImageNet's class-folder layout (the seed's data/imagenet_1k: train/<class>/<image>, val/<class>/<image> after
valprep.sh) read directly.

    folders = ClassFolders("/data/imagenet_1k/train")          # classes: sorted sub-folder names; labels: their index
    train = ClassFolderImages(folders, length=400_000_000, size=(224, 224), mean=..., std=..., seed=1234,
                              augment=Augment(scale=(0.08, 1.0), flip=True))
    train[n] -> {"images": [3, 224, 224] float32, "labels": int64}

A training dataset is sized for the whole run: sample n is image n mod (images in the folders), with its own
random crop drawn from (seed, n). A validation dataset (augment None) holds each image once, centre-cropped.
"""

import dataclasses
import os
from collections.abc import Sequence

import torch

from ...contract.schemas.vision_training import IMAGE_EXTENSIONS
from ..common.config import JobConfigError
from .images import decode, evaluation_pixels, sample_rng, training_pixels


class ClassFolders:
    """The images of <root>/<class>/ and their class index; `classes` fixes the classes (a validation folder
    must use the training folder's)."""

    def __init__(self, root: str, classes: Sequence[str] | None = None, key: str = "model.data.data_path"):
        if not os.path.isdir(root):
            raise JobConfigError(f"{key}: {root} is no folder; ImageNet's layout is <folder>/<class name>/<image file>")
        found = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))
        self.classes: list[str] = list(classes) if classes is not None else found
        unknown = sorted(set(found) - set(self.classes))
        if unknown:
            raise JobConfigError(
                f"{key}: {root} holds classes the training folder has not ({', '.join(unknown[:5])}); "
                "both folders must hold the same class sub-folders"
            )
        self.items: list[tuple[str, int]] = []
        for label, name in enumerate(self.classes):
            folder = os.path.join(root, name)
            if os.path.isdir(folder):
                self.items += [
                    (os.path.join(folder, f), label) for f in sorted(os.listdir(folder)) if f.endswith(IMAGE_EXTENSIONS)
                ]
        if not self.items:
            raise JobConfigError(f"{key}: {root} holds no images in class sub-folders ({', '.join(IMAGE_EXTENSIONS)})")
        self.root = root

    def __len__(self) -> int:
        return len(self.items)


@dataclasses.dataclass(frozen=True)
class Augment:
    scale: tuple[float, float]  # share of the image area a training crop keeps
    flip: bool  # mirror half of the crops


class ClassFolderImages(torch.utils.data.Dataset):
    def __init__(
        self, folders: ClassFolders, length: int, size: tuple[int, int], mean, std, seed: int, augment: Augment | None
    ):
        self.folders, self.length, self.size = folders, length, size
        self.mean, self.std, self.seed, self.augment = mean, std, seed, augment

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, sample: int):
        path, label = self.folders.items[sample % len(self.folders)]
        image = decode(path)
        height, width = self.size
        if self.augment is None:
            pixels = evaluation_pixels(image, height, width, self.mean, self.std)
        else:
            pixels = training_pixels(
                image,
                height,
                width,
                sample_rng(self.seed, sample),
                self.augment.scale,
                self.augment.flip,
                self.mean,
                self.std,
            )
        return {"images": torch.from_numpy(pixels), "labels": torch.tensor(label, dtype=torch.long)}
