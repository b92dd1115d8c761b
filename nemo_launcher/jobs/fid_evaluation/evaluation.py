"""What the FID/CLIP evaluation steps share: the bound config, the captions, the images on disk, the CSV files.

cfg = load_config("fid", argv)                     # FidClipConfig, bound as the launcher bound it
names, captions = read_captions(cfg)               # the first fid.num_images_to_eval caption files, name order
folder = scale_folder(cfg, 7.5)                    # <fid.save_path>/cfg7.5
"""

import csv
import os
from collections.abc import Sequence

from nemo_launcher.contract.schemas.sd_evaluation import FidClipConfig

from ..common.errors import DataPrepError
from ..steps.config import load_bound

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def load_config(step: str, argv: Sequence[str] = None) -> FidClipConfig:
    return load_bound(FidClipConfig, f"nemo_launcher.jobs.fid_evaluation.{step}", argv)


def read_captions(cfg: FidClipConfig) -> tuple[list[str], list[str]]:
    """(names, captions) of the first num_images_to_eval `<name>.txt` files of fid.coco_captions_path."""
    folder = cfg.fid.coco_captions_path
    if not os.path.isdir(folder):
        raise DataPrepError(
            f"evaluation.fid.coco_captions_path={folder!r}: no such folder; run "
            f"data_preparation=fid_evaluation/download_coco2014 first"
        )
    names = sorted(name[:-4] for name in os.listdir(folder) if name.endswith(".txt"))[: cfg.fid.num_images_to_eval]
    if not names:
        raise DataPrepError(f"evaluation.fid.coco_captions_path={folder!r}: no .txt caption files")
    captions = []
    for name in names:
        with open(os.path.join(folder, name + ".txt"), encoding="utf-8") as handle:
            captions.append(handle.read().strip())
    return names, captions


def scale_folder(cfg: FidClipConfig, scale: float) -> str:
    return os.path.join(cfg.fid.save_path, f"cfg{scale:g}")


def load_images(paths: list[str], size: int) -> list:
    """RGB images at size x size (bicubic), as FID and the CLIP score read them."""
    from PIL import Image

    images = []
    for path in paths:
        with Image.open(path) as image:
            image = image.convert("RGB")
            images.append(image if image.size == (size, size) else image.resize((size, size), Image.BICUBIC))
    return images


def generated_images(cfg: FidClipConfig, scale: float, names: list[str]) -> list[str]:
    folder = scale_folder(cfg, scale)
    paths = [os.path.join(folder, name + ".png") for name in names]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise DataPrepError(
            f"evaluation.fid.save_path={cfg.fid.save_path!r}: {len(missing)} of {len(paths)} images of "
            f"guidance {scale:g} are missing (first: {missing[0]}); run the generate step (generate_images: true)"
        )
    return paths


def write_scores(path: str, column: str, rows: dict[float, float], model: str) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["cfg", column, "model"])
        for scale, value in rows.items():
            writer.writerow([f"{scale:g}", f"{value:.6f}", model])
    os.replace(temporary, path)


def read_scores(path: str, column: str) -> dict[float, float]:
    if not os.path.isfile(path):
        raise DataPrepError(f"{path}: no such file; run the step that writes it first")
    with open(path, newline="") as handle:
        return {float(row["cfg"]): float(row[column]) for row in csv.DictReader(handle)}


def device():
    import torch

    if torch.cuda.is_available():
        return torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))) % torch.cuda.device_count()
        )
    return torch.device("cpu")
