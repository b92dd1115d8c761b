"""InstructPix2Pix's training examples from the authors' clip-filtered-dataset layout, and a tiny generated one.

    dataset = EditExamples(read_index(root), root, length, resolution, tokenizer, max_length)
    dataset[n] -> {"image": the edited image, "source": the input image ([3, R, R] pixels in [-1, 1]),
                   "text": the instruction's token ids, "sample": n}
    write_edit_shapes(root, examples=64, seed=0, size=32)   # coloured shapes and "make it blue"-style instructions

Layout (schema: contract/schemas/sd_finetuning.py EditData): <root>/seeds.json lists [folder, [seed, ...]];
<root>/<folder>/prompt.json has the instruction under "edit"; <folder>/<seed>_0.jpg is the input and <seed>_1.jpg
the edited image. Sample n is example n mod count (the core's samplers order or reshuffle them), so it is the same
example in any process and after any resume.
"""

import json
import os
import random
from pathlib import Path

import torch

from ..common.config import JobConfigError
from ..multimodal.shapes import COLOURS, SHAPES
from .data import image_pixels

SEEDS_FILE = "seeds.json"
_INSTRUCTIONS = ("make it {}", "turn it {}", "colour the {} {}", "paint the {} {}")


def read_index(root: str) -> list[tuple[str, int]]:
    """(folder, seed) of every example, in the index's order."""
    path = Path(root) / SEEDS_FILE
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise JobConfigError(
            f"model.data.data_path={root!r}: cannot read {SEEDS_FILE} ({error}); point it at a "
            "clip-filtered-dataset folder"
        ) from None
    examples = [(str(folder), int(seed)) for folder, seeds in entries for seed in seeds]
    if not examples:
        raise JobConfigError(f"model.data.data_path={root!r}: {SEEDS_FILE} lists no examples")
    return examples


class EditExamples(torch.utils.data.Dataset):
    def __init__(self, examples, root: str, length: int, resolution: int, tokenizer, max_length: int):
        self.examples, self.root, self.length, self.resolution = examples, Path(root), length, resolution
        self.tokenizer, self.max_length = tokenizer, max_length

    def __len__(self) -> int:
        return self.length

    def _pixels(self, path: Path) -> torch.Tensor:
        from ..vision.images import decode

        try:
            image = decode(path.read_bytes())
        except OSError as error:
            raise JobConfigError(f"model.data.data_path: cannot read {path} ({error})") from None
        return torch.from_numpy(image_pixels(image, self.resolution))

    def __getitem__(self, sample: int):
        folder, seed = self.examples[sample % len(self.examples)]
        where = self.root / folder
        instruction = json.loads((where / "prompt.json").read_text())["edit"]
        return {
            "image": self._pixels(where / f"{seed}_1.jpg"),
            "source": self._pixels(where / f"{seed}_0.jpg"),
            "text": torch.tensor(self.tokenizer.encode(instruction, self.max_length), dtype=torch.long),
            "sample": torch.tensor(sample),
        }


def datasets(cfg, tokenizer, sizes):
    """(train, None, None): the fine-tune has no held-out split."""
    m = cfg.model
    train = EditExamples(
        read_index(m.data.data_path),
        m.data.data_path,
        sizes[0],
        m.data.resolution,
        tokenizer,
        m.cond_stage_config.max_length,
    )
    return train, None, None


def describe(cfg, train, valid) -> str:
    return f"InstructPix2Pix edits: {len(train.examples)} (input, instruction, edited) examples under {train.root}"


# ---- the tiny generated dataset ---------------------------------------------------------------------------


def edit_shapes_example(index: int, seed: int, size: int):
    """(input image, instruction, edited image): one shape on a plain background, recoloured by the instruction."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed * 1_000_003 + index)
    shape = SHAPES[index % len(SHAPES)]
    before, after = rng.sample(sorted(COLOURS), 2)
    background = tuple(rng.randint(120, 200) for _ in range(3))
    extent = rng.uniform(0.45, 0.8) * size
    left, top = rng.uniform(0, size - extent), rng.uniform(0, size - extent)
    box = (left, top, left + extent, top + extent)
    pictures = []
    for colour in (before, after):
        image = Image.new("RGB", (size, size), background)
        draw = ImageDraw.Draw(image)
        if shape == "circle":
            draw.ellipse(box, fill=COLOURS[colour])
        elif shape == "square":
            draw.rectangle(box, fill=COLOURS[colour])
        else:
            draw.polygon(
                [(left + extent / 2, top), (left, top + extent), (left + extent, top + extent)], fill=COLOURS[colour]
            )
        pictures.append(image)
    template = rng.choice(_INSTRUCTIONS)
    instruction = template.format(shape, after) if template.count("{}") == 2 else template.format(after)
    return pictures[0], instruction, pictures[1]


def write_edit_shapes(root: str, examples: int, seed: int = 0, size: int = 32) -> None:
    """A clip-filtered-dataset folder of `examples` generated edits (one seed per folder), written atomically per
    file so an interrupted run leaves no half-written image."""
    root = Path(root)
    index = []
    for number in range(examples):
        before, instruction, after = edit_shapes_example(number, seed, size)
        folder = root / f"{number:07d}"
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "prompt.json", {"edit": instruction})
        for image, name in ((before, f"{seed}_0.jpg"), (after, f"{seed}_1.jpg")):
            temporary = folder / f".{name}.{os.getpid()}"
            image.save(temporary, format="JPEG", quality=95)
            os.replace(temporary, folder / name)
        index.append([folder.name, [seed]])
    _write_json(root / SEEDS_FILE, index)


def _write_json(path: Path, value) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)
