"""The generated coloured shapes (shapes.py) in ImageNet's class-folder layout, for the tiny ViT configs, the vision
tests and the multimodal generate_shapes step (no ImageNet here). The ViT family's data step is
vision/shape_folders.py.

    write_shape_folders("/data/tiny_shapes_folders", train=480, val=120, size=64, seed=0)
    # /data/.../train/<class>/<n>.png and /data/.../val/<class>/<n>.png; class folders named "red_circle", ...

Validation images are other examples of the same generator (indices after the training ones), so they test more
than memory. A rerun with the same settings leaves the folders as they are; one with other settings rewrites them
whole, so that no image of the earlier settings stays behind to be read as a training example.
"""

import json
import os
import shutil

from .shapes import CLASSES, shape_example

SETTINGS_FILE = "shape_folders.json"
SPLITS = ("train", "val")


def folder_name(label: int) -> str:
    return CLASSES[label].replace(" ", "_")


class ForeignFolders(Exception):  # turned into each step's DataConfigError with its own key
    """The root holds train/ or val/ folders that this generator did not write."""


def write_shape_folders(root: str, train: int, val: int, size: int, seed: int) -> bool:
    """False when `root` already holds these folders."""
    settings = {"train": train, "val": val, "size": size, "seed": seed, "classes": CLASSES}
    marker = os.path.join(root, SETTINGS_FILE)
    if os.path.isfile(marker):
        with open(marker) as handle:
            if json.load(handle) == settings:
                return False
        os.remove(marker)  # from here on the folders are incomplete until the new marker is written
        for split in SPLITS:
            shutil.rmtree(os.path.join(root, split), ignore_errors=True)
    else:
        # Never mix generated images into (or delete) a real dataset that output_dir was pointed at by mistake.
        present = [split for split in SPLITS if os.path.exists(os.path.join(root, split))]
        if present:
            raise ForeignFolders(os.path.join(root, present[0]))
    for split, first, count in (("train", 0, train), ("val", train, val)):
        for label in range(len(CLASSES)):
            os.makedirs(os.path.join(root, split, folder_name(label)), exist_ok=True)
        for index in range(first, first + count):
            image, _, label = shape_example(index, seed, size)
            path = os.path.join(root, split, folder_name(label), f"{index:06d}.png")
            image.save(path + ".tmp", format="PNG")
            os.replace(path + ".tmp", path)
    with open(marker + ".tmp", "w") as handle:
        json.dump(settings, handle, indent=1)
    os.replace(marker + ".tmp", marker)
    return True
