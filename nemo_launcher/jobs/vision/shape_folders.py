"""The generated coloured shapes (jobs/multimodal/shapes.py) in ImageNet's class-folder layout, for the tiny ViT
configs and the vision tests (no ImageNet here).

    write_shape_folders("/data/tiny_shapes_folders", train=480, val=120, size=64, seed=0)
    # /data/.../train/<class>/<n>.png and /data/.../val/<class>/<n>.png; class folders named "red_circle", ...

Validation images are other examples of the same generator (indices after the training ones), so they test more
than memory. A rerun with the same settings leaves the folders as they are.
"""
import json
import os

from ..multimodal.shapes import CLASSES, shape_example

_SETTINGS = "shape_folders.json"


def folder_name(label: int) -> str:
    return CLASSES[label].replace(" ", "_")


def write_shape_folders(root: str, train: int, val: int, size: int, seed: int) -> bool:
    """False when `root` already holds these folders."""
    settings = {"train": train, "val": val, "size": size, "seed": seed, "classes": CLASSES}
    marker = os.path.join(root, _SETTINGS)
    if os.path.isfile(marker):
        with open(marker) as handle:
            if json.load(handle) == settings:
                return False
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
