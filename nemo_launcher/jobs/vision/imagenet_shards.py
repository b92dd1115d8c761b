"""ImageNet's class folders packed into WebDataset shards (data_preparation=vit/imagenet_webdataset), for loaders
that read tars rather than a million small files:

    python3 -u -m nemo_launcher.jobs.vision.imagenet_shards --config <job dir>/<run.name>_hydra.yaml

    pack_split("/data/imagenet_1k/train", "/data/imagenet_1k_wds/train", per_shard=1000, seed=0)

Per split: every image of <input_dir>/<split>/<class>/ (the classes of the first split, in sorted order, fix the
labels, as ViT training's ClassFolders does) becomes one example of <key>.<its extension> (the file's bytes as
stored), <key>.cls (the class index) and <key>.txt (the class folder name), in an order drawn from shuffle_seed
(or folder order); <n>.tar holds examples n x per_shard onwards. classes.json and wdinfo.pkl (generate_wdinfo's
format: full tars, and the shorter last one apart) are written beside the tars. Each tar is written under a
temporary name and renamed, and a plan.json records what the tars were cut from: a rerun keeps the tars of the
same plan and writes only the missing ones; another plan (images added, settings changed) rewrites the split.
"""

import json
import os
import pickle
from collections.abc import Sequence

import numpy as np

PROG = "nemo_launcher.jobs.vision.imagenet_shards"
_PLAN = "plan.json"


def split_images(folder: str, classes: Sequence[str] | None) -> tuple:
    """(classes, [(relative path, label)]) of a class-folder tree; `classes` fixes the labels (None: its own)."""
    from .class_folders import ClassFolders

    found = ClassFolders(folder, classes, key="data_preparation.input_dir")
    return found.classes, [(os.path.relpath(path, folder), label) for path, label in found.items]


def _shard_name(index: int) -> str:
    return f"{index:06d}.tar"


def pack_split(
    source: str, target: str, per_shard: int, seed: int | None, classes: Sequence[str] | None = None
) -> dict:
    """Writes the split's tars (keeping those a rerun of the same plan already wrote); returns what it did."""
    from ..multimodal.generate_wdinfo import wdinfo
    from ..multimodal.tars import AtomicTar

    classes, images = split_images(source, classes)
    order = list(range(len(images))) if seed is None else np.random.default_rng(seed).permutation(len(images)).tolist()
    plan = {"images": [images[i][0] for i in order], "per_shard": per_shard, "classes": list(classes)}
    os.makedirs(target, exist_ok=True)
    plan_path = os.path.join(target, _PLAN)
    if _read_json(plan_path) != plan:
        for name in os.listdir(target):  # the tars of another plan would mix in other examples
            if name.endswith(".tar") or name == _PLAN:
                os.remove(os.path.join(target, name))
        _write(plan_path, json.dumps(plan).encode())
    written, kept = [], []
    shards = (len(order) + per_shard - 1) // per_shard
    for shard in range(shards):
        path = os.path.join(target, _shard_name(shard))
        if os.path.exists(path):
            kept.append(_shard_name(shard))
            continue
        with AtomicTar(path) as tar:
            for position in range(shard * per_shard, min((shard + 1) * per_shard, len(order))):
                relative, label = images[order[position]]
                with open(os.path.join(source, relative), "rb") as handle:
                    data = handle.read()
                extension = os.path.splitext(relative)[1].lstrip(".").lower()
                tar.write(
                    {
                        "__key__": f"{position:09d}",
                        extension: data,
                        "cls": str(label).encode(),
                        "txt": classes[label].encode(),
                    }
                )
        written.append(_shard_name(shard))
    _write(os.path.join(target, "classes.json"), json.dumps(list(classes), indent=1).encode())
    info = wdinfo(target, target, per_shard, [".cls"])
    _write(os.path.join(target, "wdinfo.pkl"), pickle.dumps(info))
    return {"classes": list(classes), "images": len(order), "written": written, "kept": kept, "shards": shards}


def _read_json(path: str):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write(path: str, data: bytes) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def main(argv=None):
    from ...contract.schemas.vit_data import ImagenetShardsConfig
    from ..common.config import JobConfigError
    from ..steps.config import DataConfigError, load_bound
    from ..steps.step_report import StepReport

    cfg = load_bound(ImagenetShardsConfig, PROG, argv)
    report = StepReport("imagenet_shards", unit="shard")
    classes: list[str] | None = None
    for split in cfg.splits:
        try:
            done = pack_split(
                os.path.join(cfg.input_dir, split),
                os.path.join(cfg.output_dir, split),
                cfg.examples_per_shard,
                cfg.shuffle_seed,
                classes,
            )
        except JobConfigError as error:
            raise DataConfigError(str(error)) from None
        classes = done["classes"]  # later splits are labelled as the first
        for name in done["written"]:
            report.done(f"{split}/{name}", output=os.path.join(cfg.output_dir, split))
        for name in done["kept"]:
            report.kept(f"{split}/{name}")
        report.note(
            split,
            f"{done['images']} images of {len(classes)} classes in {done['shards']} tars: "
            f"{os.path.join(cfg.output_dir, split)} (wdinfo.pkl, classes.json)",
        )
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
