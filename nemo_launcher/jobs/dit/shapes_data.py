"""A generated Energon dataset of coloured shapes with class captions, for the tiny DiT (no network here).

    python3 -u -m nemo_launcher.jobs.dit.shapes_data --config <job dir>/<run.name>_hydra.yaml   (data_preparation=dit/*)

Writes output_dir as seed 002 describes DiT data: WebDataset shards `shard_NNN.tar` of samples
`samples/sample_NNNN.{pth,pickle,json}` (latents, text embeddings, metadata), then indexes them as `energon
prepare` does (split 1,0,0, CrudeWebdataset). Each image is one of CLASSES (a colour and a shape, jittered in place
and size) on a dark background, H x W RGB in [-1, 1], stored directly as the latents [3, 1, H, W] (there is no VAE
to train here). A caption's text embedding is a stand-in for T5's: one fixed pseudo-random vector per word (seeded
by the word), rows padded with zeros to text_length. A rerun with the same settings leaves the dataset as it is.
"""

import io
import json
import pickle
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the annotation only: numpy is imported in the function that draws
    import numpy

PROG = "python3 -m nemo_launcher.jobs.dit.shapes_data"
CLASSES: tuple[tuple[str, str, tuple[float, float, float]], ...] = (
    ("red", "circle", (1.0, -0.8, -0.8)),
    ("green", "square", (-0.8, 1.0, -0.8)),
    ("blue", "triangle", (-0.8, -0.8, 1.0)),
    ("yellow", "cross", (1.0, 1.0, -0.8)),
)
BACKGROUND = -0.9
_SETTINGS_FILE = "shapes_settings.json"


def caption(label: int) -> str:
    colour, shape, _ = CLASSES[label]
    return f"a {colour} {shape}"


def text_embedding(text: str, length: int, width: int):
    """[length, width] float32: a fixed unit-variance vector per word, zero rows after the last word."""
    import numpy as np

    rows = np.zeros((length, width), dtype=np.float32)
    for i, word in enumerate(text.split()[:length]):
        rows[i] = np.random.default_rng(zlib.crc32(word.encode())).standard_normal(width).astype(np.float32)
    return rows


def draw(label: int, size: int, rng) -> "numpy.ndarray":
    """[3, size, size] in [-1, 1]: the class's shape in its colour, centre and radius jittered."""
    import numpy as np

    _, shape, colour = CLASSES[label]
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    cy, cx = size / 2 + rng.uniform(-size / 8, size / 8, 2)
    r = size * rng.uniform(0.25, 0.35)
    dy, dx = y - cy, x - cx
    if shape == "circle":
        mask = dy**2 + dx**2 <= r**2
    elif shape == "square":
        mask = (abs(dy) <= r * 0.85) & (abs(dx) <= r * 0.85)
    elif shape == "triangle":
        mask = (dy <= r * 0.8) & (dy >= -r) & (abs(dx) <= (dy + r) * 0.6)
    else:
        mask = ((abs(dy) <= r * 0.3) & (abs(dx) <= r)) | ((abs(dx) <= r * 0.3) & (abs(dy) <= r))
    image = np.full((3, size, size), BACKGROUND, dtype=np.float32)
    for channel, value in enumerate(colour):
        image[channel][mask] = value
    return image


def write_shapes(
    path: Path, image_size: int, text_length: int, text_width: int, seed: int, samples: int, shard_size: int
) -> bool:
    """Writes and indexes the dataset; False when `path` already holds it with these settings."""
    import numpy as np
    import torch
    import webdataset as wds

    settings = {
        "image_size": image_size,
        "text_length": text_length,
        "text_width": text_width,
        "seed": seed,
        "samples": samples,
        "shard_size": shard_size,
        "classes": [caption(i) for i in range(len(CLASSES))],
    }
    marker = path / _SETTINGS_FILE
    if (
        marker.is_file()
        and json.loads(marker.read_text()) == settings
        and (path / ".nv-meta" / "dataset.yaml").is_file()
    ):
        return False
    path.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    shards = []
    for first in range(0, samples, shard_size):
        name = f"shard_{first // shard_size:03d}.tar"
        shards.append(name)
        with wds.TarWriter(str(path / name)) as writer:
            for n in range(first, min(first + shard_size, samples)):
                label = int(rng.integers(len(CLASSES)))
                latents = torch.from_numpy(draw(label, image_size, rng)).unsqueeze(1)  # [3, 1, H, W]
                buffer = io.BytesIO()
                torch.save(latents, buffer)
                text = caption(label)
                writer.write(
                    {
                        "__key__": f"samples/sample_{n:04d}",
                        "pth": buffer.getvalue(),
                        "pickle": pickle.dumps(text_embedding(text, text_length, text_width)),
                        "json": json.dumps(
                            {
                                "caption": text,
                                "label": label,
                                "height": image_size,
                                "width": image_size,
                                "aspect_ratio": 1.0,
                            }
                        ).encode(),
                    }
                )
    energon_prepare(path, shards)
    marker.write_text(json.dumps(settings, indent=1))
    return True


def energon_prepare(path: Path, shards: list[str]) -> None:
    """What `energon prepare <path> --split-ratio 1,0,0 --sample-type CrudeWebdataset` writes: the shard index and
    .nv-meta/dataset.yaml naming energon's CrudeWebdataset (the trainer's task encoder cooks its samples)."""
    import contextlib

    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    with contextlib.redirect_stdout(sys.stderr):  # energon reports its progress on stdout
        BaseWebdatasetFactory.prepare_dataset(
            EPath(path),
            shards,
            split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
            split_parts_patterns=None,
            progress_fn=lambda items, length=None: items,
            workers=1,
        )
    (path / ".nv-meta" / "dataset.yaml").write_text("__module__: megatron.energon\n__class__: CrudeWebdataset\n")


def main(argv=None):
    from ...contract.schemas.dit_data import DitShapesDataConfig
    from ..steps.config import load_bound
    from ..steps.step_report import StepReport

    cfg = load_bound(DitShapesDataConfig, PROG.removeprefix("python3 -m "), argv)
    report = StepReport("shapes_data", unit="dataset")
    output = Path(cfg.output_dir)
    if write_shapes(
        output, cfg.image_size, cfg.text_length, cfg.text_embedding_dim, cfg.seed, cfg.num_samples, cfg.shard_size
    ):
        report.done(str(output), output=str(output / ".nv-meta"))
    else:
        report.kept(str(output), output=str(output / ".nv-meta"))
    report.note(
        "samples", f"{cfg.num_samples} of {len(CLASSES)} classes ({', '.join(caption(i) for i in range(len(CLASSES)))})"
    )
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
