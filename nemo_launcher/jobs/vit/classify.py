"""ViT framework inference: `python3 -m nemo_launcher.jobs.vit.classify --config <resolved fw_inference yaml>`.

Every image file under data_path (sub-folders included, in sorted order) is cropped as evaluation crops it and
classified by the saved ViT in batches of model.micro_batch_size. Writes <run.results_dir>/predictions.json:

    {"model": ..., "images": N, "predictions": [{"image": "val/red_circle/000480.png", "class": "red_circle",
      "label": 0, "probability": 0.93, "top_k": [{"class": ..., "label": ..., "probability": ...}, ...]}, ...],
     "unreadable": [...], "class_counts": {...}, "folder_agreement": {"images": n, "agreeing": m} or null}

and prints a table. folder_agreement counts the images whose parent folder is named after one of the model's
classes (ImageNet's layout) and how many of them were put in that class. An undecodable file is listed under
unreadable and skipped. Schema: contract/schemas/vision_inference.py (VitClassifyConfig).
"""

import json
import sys
from pathlib import Path

from ...contract.schemas.vision_inference import PREDICTIONS_FILE, STAGE, VitClassifyConfig
from ...contract.schemas.vision_training import IMAGE_EXTENSIONS
from ..common.config import JobConfigError
from ..vision.entry import saved_model_main

PROG = "python3 -m nemo_launcher.jobs.vit.classify"
_TABLE_ROWS = 20  # images listed in the log; predictions.json holds them all


def image_files(data_path: str) -> list[Path]:
    root = Path(data_path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise JobConfigError(f"{STAGE}.data_path={data_path!r}: no such file or folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(IMAGE_EXTENSIONS))
    if not files:
        raise JobConfigError(f"{STAGE}.data_path={data_path!r}: holds no image files ({', '.join(IMAGE_EXTENSIONS)})")
    return files


def _readable_pixels(saved, files: list[Path], unreadable: list[str], root: Path):
    from PIL import UnidentifiedImageError

    kept, pixels = [], []
    for path in files:
        try:
            pixels.append(saved.pixels(str(path)))
        except (UnidentifiedImageError, OSError):
            unreadable.append(_shown(path, root))
            continue
        kept.append(path)
    return kept, pixels


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if root.is_dir() else path.name


def classify(saved, files: list[Path], root: Path, batch_size: int, top_k: int) -> dict:
    import torch

    classes = saved.model_config.num_classes
    names = saved.class_names or [f"class {label}" for label in range(classes)]
    k = min(top_k, classes)
    predictions, unreadable = [], []
    for start in range(0, len(files), batch_size):
        kept, pixels = _readable_pixels(saved, files[start : start + batch_size], unreadable, root)
        if not kept:
            continue
        probabilities = torch.softmax(saved.classify(torch.stack(pixels)), dim=-1)
        top = probabilities.topk(k, dim=-1)
        for path, values, labels in zip(kept, top.values.tolist(), top.indices.tolist()):
            ranked = [
                {"class": names[label], "label": label, "probability": value} for value, label in zip(values, labels)
            ]
            predictions.append({"image": _shown(path, root), **ranked[0], "top_k": ranked})
    counts: dict[str, int] = {}
    for row in predictions:
        counts[row["class"]] = counts.get(row["class"], 0) + 1
    return {
        "images": len(predictions),
        "predictions": predictions,
        "unreadable": unreadable,
        "class_counts": dict(sorted(counts.items(), key=lambda item: -item[1])),
        "folder_agreement": _folder_agreement(predictions, saved.class_names),
    }


def _folder_agreement(predictions: list[dict], class_names):
    if not class_names:
        return None
    named = [row for row in predictions if Path(row["image"]).parent.name in class_names]
    if not named:
        return None
    return {"images": len(named), "agreeing": sum(Path(row["image"]).parent.name == row["class"] for row in named)}


def table(result: dict) -> str:
    rows = result["predictions"]
    width = max([len("image")] + [len(row["image"]) for row in rows[:_TABLE_ROWS]])
    lines = [f"{'image'.ljust(width)}  {'class':<24} probability"]
    lines += [f"{row['image'].ljust(width)}  {row['class']:<24} {row['probability']:.4f}" for row in rows[:_TABLE_ROWS]]
    if len(rows) > _TABLE_ROWS:
        lines.append(f"... and {len(rows) - _TABLE_ROWS} more images")
    return "\n".join(lines)


def work(cfg):
    from ..common.report import Summary
    from ..vision.saved_model_job import load_for

    files = image_files(cfg.data_path)
    saved = load_for(cfg, "vit", STAGE)
    result = {
        "model": cfg.model.restore_from_path,
        "data_path": cfg.data_path,
        "precision": saved.precision,
        **classify(saved, files, Path(cfg.data_path), cfg.model.micro_batch_size, cfg.top_k),
    }
    if not result["images"]:
        raise JobConfigError(f"{STAGE}.data_path={cfg.data_path!r}: none of its {len(files)} image files could be read")
    output = Path(cfg.run.results_dir) / PREDICTIONS_FILE
    output.write_text(json.dumps(result, indent=1))
    print(table(result), flush=True)
    summary = Summary(f"classification finished: {result['images']} images, {saved.model_config.num_classes} classes")
    summary.add("most predicted", ", ".join(f"{name} ({n})" for name, n in list(result["class_counts"].items())[:5]))
    agreement = result["folder_agreement"]
    if agreement:
        summary.add(
            "folder names",
            f"{agreement['agreeing']} of {agreement['images']} images in a folder named after "
            f"a class were put in that class ({100 * agreement['agreeing'] / agreement['images']:.1f}%)",
        )
    if result["unreadable"]:
        summary.add("unreadable", f"{len(result['unreadable'])} files skipped (listed in {PREDICTIONS_FILE})")
    return summary.add("predictions", output)


main = saved_model_main(PROG, VitClassifyConfig, STAGE, work)


if __name__ == "__main__":
    sys.exit(main())
