"""A synthetic image-caption corpus: one coloured shape per image, its caption naming colour and shape.

    image, caption, label = shape_example(7, seed=0, size=64)   # PIL image, "a photo of a blue triangle", 9
    write_repository("/data/repo", num_examples=480, num_files=2, size=64, seed=0)
    # /data/repo/images/000007.png ..., /data/repo/data/train-00000-of-00002.parquet (URL, TEXT, LABEL)

Twelve classes (3 shapes x 4 colours) that a tiny model tells apart, drawn at random positions, sizes and
backgrounds, so that held-out images test more than memory. Example i depends on (seed, i) only. Tests serve the
same images over HTTP by passing `url_for`.
"""

import os
import random
from collections.abc import Callable

SHAPES = ("circle", "square", "triangle")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 215),
    "yellow": (230, 200, 30),
}
CLASSES = [f"{colour} {shape}" for shape in SHAPES for colour in COLOURS]
_TEMPLATES = ("a photo of a {}", "a {}", "a {} on a plain background", "a drawing of a {}")


def shape_example(index: int, seed: int, size: int):
    """(PIL image, caption, class index) of example `index`."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed * 1_000_003 + index)
    label = index % len(CLASSES)
    colour, shape = CLASSES[label].split(" ")
    background = tuple(rng.randint(120, 200) for _ in range(3))
    image = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(image)
    extent = rng.uniform(0.35, 0.7) * size
    left, top = rng.uniform(0, size - extent), rng.uniform(0, size - extent)
    box = (left, top, left + extent, top + extent)
    fill = tuple(min(255, max(0, c + rng.randint(-25, 25))) for c in COLOURS[colour])
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(left + extent / 2, top), (left, top + extent), (left + extent, top + extent)], fill=fill)
    caption = rng.choice(_TEMPLATES).format(CLASSES[label])
    return image, caption, label


def write_repository(
    root: str, num_examples: int, num_files: int, size: int, seed: int, url_for: Callable[[int, str], str] | None = None
) -> list[str]:
    """Images under <root>/images and parquet files (URL, TEXT, LABEL) under <root>/data; returns the parquet paths.
    `url_for(index, image path)` gives each row's URL (default file://<image path>)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = os.path.join(root, "images")
    os.makedirs(images, exist_ok=True)
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    rows = {"URL": [], "TEXT": [], "LABEL": []}
    for index in range(num_examples):
        image, caption, label = shape_example(index, seed, size)
        path = os.path.join(images, f"{index:06d}.png")
        if not os.path.isfile(path):
            _save_atomically(image, path)
        rows["URL"].append(url_for(index, path) if url_for else "file://" + os.path.abspath(path))
        rows["TEXT"].append(caption)
        rows["LABEL"].append(label)
    paths = []
    for number in range(num_files):
        first, last = number * num_examples // num_files, (number + 1) * num_examples // num_files
        table = pa.table({name: values[first:last] for name, values in rows.items()})
        path = os.path.join(root, "data", f"train-{number:05d}-of-{num_files:05d}.parquet")
        pq.write_table(table, path + ".tmp")
        os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


def _save_atomically(image, path: str) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    image.save(temporary, format="PNG")
    os.replace(temporary, path)
