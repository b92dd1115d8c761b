"""COCO-2014 validation data for the FID/CLIP evaluation: reading captions_val2014.json, sampling captions, the
256-pixel images, and a generated stand-in in COCO's layout.

    cfg = load_data_config("preprocess", argv)          # FidEvaluationDataConfig, as the launcher bound it
    main = step_main("preprocess", "set", write)        # a step module's main: bind, write(cfg, report), report
    images, annotations = read_coco_captions(path)      # {image id: file name}, [(annotation id, image id, caption)]
    write_caption_files(cfg)                            # <captions_output_dir>/<stem>_<annotation id>.txt
"""

import json
import os
import random
from collections.abc import Callable, Sequence

from nemo_launcher.contract.schemas.fid_evaluation_data import CocoReferenceData, FidEvaluationDataConfig

from ..common.errors import DataPrepError
from ..steps.config import load_bound
from ..steps.step_report import StepReport


def load_data_config(step: str, argv: Sequence[str] = None) -> FidEvaluationDataConfig:
    return load_bound(FidEvaluationDataConfig, f"nemo_launcher.jobs.fid_evaluation.{step}", argv)


def step_main(step: str, unit: str, write: Callable[[FidEvaluationDataConfig, StepReport], None]):
    """The `main(argv)` of the reference-data step `step`: bind its config, let `write` do the work and report on
    it (in `unit`s), return the report for run_step to print."""

    def main(argv: Sequence[str] = None) -> StepReport:
        report = StepReport(step, unit=unit)
        write(load_data_config(step, argv), report)
        return report

    return main


def read_coco_captions(path: str) -> tuple[dict[int, str], list[tuple[int, int, str]]]:
    key = "data_preparation.coco_captions_file"
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        images = {int(image["id"]): image["file_name"] for image in data["images"]}
        annotations = [(int(a["id"]), int(a["image_id"]), a["caption"]) for a in data["annotations"]]
    except FileNotFoundError:
        raise DataPrepError(
            f"{key}={path!r}: no such file; put COCO's annotations/captions_val2014.json there"
        ) from None
    except (ValueError, KeyError, TypeError) as error:
        raise DataPrepError(
            f"{key}={path!r}: not a COCO captions file ({type(error).__name__}: {error}); it needs "
            "'images' with id and file_name, 'annotations' with id, image_id and caption"
        ) from None
    unknown = [image for _, image, _ in annotations if image not in images]
    if unknown:
        raise DataPrepError(
            f"{key}={path!r}: {len(unknown)} captions name images the file does not list (first: image_id {unknown[0]})"
        )
    return images, annotations


def stem(file_name: str) -> str:
    return os.path.splitext(os.path.basename(file_name))[0]


def sample_captions(annotations: list[tuple[int, int, str]], count: int, seed: int) -> list[tuple[int, int, str]]:
    """`count` annotations drawn without replacement (all of them when there are fewer), in annotation-id order, so
    the same file and seed always give the same sample."""
    ordered = sorted(annotations)
    if count >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, count))


def _write_text(path: str, text: str) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def write_caption_files(cfg: CocoReferenceData) -> int:
    """One <image stem>_<annotation id>.txt per sampled caption, replacing whatever the folder held before (a
    sample of other settings must not mix with this one). Returns the number written."""
    images, annotations = read_coco_captions(cfg.coco_captions_file)
    sample = sample_captions(annotations, cfg.num_captions, cfg.seed)
    folder = cfg.captions_output_dir
    os.makedirs(folder, exist_ok=True)
    wanted = {f"{stem(images[image])}_{annotation}.txt": caption.strip() for annotation, image, caption in sample}
    for name in os.listdir(folder):
        if name.endswith(".txt") and name not in wanted:
            os.remove(os.path.join(folder, name))
    for name, caption in wanted.items():
        _write_text(os.path.join(folder, name), caption + "\n")
    return len(wanted)


def square_image(source: str, target: str, size: int) -> None:
    """The centre square of an image, resized to size x size (bicubic), as an RGB PNG."""
    from PIL import Image

    with Image.open(source) as image:
        image = image.convert("RGB")
        side = min(image.size)
        left, top = (image.width - side) // 2, (image.height - side) // 2
        image = image.crop((left, top, left + side, top + side)).resize((size, size), Image.BICUBIC)
        temporary = f"{target}.tmp-{os.getpid()}.png"
        image.save(temporary, format="PNG")
    os.replace(temporary, target)


def _square_one(job: tuple[str, str, int]) -> str:
    square_image(*job)
    return job[1]


def write_square_images(cfg: CocoReferenceData) -> tuple[int, int]:
    """(written, kept): every .jpg/.png of coco_images_dir as <stem>.png in images_output_dir; an output newer than
    its source is kept, so a rerun finishes an interrupted one."""
    source = cfg.coco_images_dir
    if not os.path.isdir(source):
        raise DataPrepError(
            f"data_preparation.coco_images_dir={source!r}: no such folder; put COCO's val2014 images there"
        )
    names = sorted(n for n in os.listdir(source) if n.lower().endswith((".jpg", ".jpeg", ".png")))
    if not names:
        raise DataPrepError(f"data_preparation.coco_images_dir={source!r}: no .jpg or .png images")
    os.makedirs(cfg.images_output_dir, exist_ok=True)
    jobs, kept = [], 0
    for name in names:
        target = os.path.join(cfg.images_output_dir, stem(name) + ".png")
        if os.path.isfile(target) and os.path.getmtime(target) >= os.path.getmtime(os.path.join(source, name)):
            kept += 1
        else:
            jobs.append((os.path.join(source, name), target, cfg.image_size))
    processes = min(cfg.num_processes, len(jobs))
    if processes > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_square_one, jobs, chunksize=64))
    else:
        for job in jobs:
            _square_one(job)
    return len(jobs), kept


def write_coco_shapes(images_dir: str, captions_file: str, count: int, size: int, seed: int) -> None:
    """`count` generated shapes as COCO_val2014_<id>.jpg and a captions_val2014.json naming them: two captions per
    image, as COCO has several, so that sampling captions is exercised."""
    from ..multimodal.shapes import shape_example

    os.makedirs(images_dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(captions_file)), exist_ok=True)
    images, annotations = [], []
    for index in range(count):
        image, caption, _ = shape_example(index, seed, size)
        image_id = index + 1
        name = f"COCO_val2014_{image_id:012d}.jpg"
        path = os.path.join(images_dir, name)
        image.save(f"{path}.tmp", format="JPEG", quality=95)
        os.replace(f"{path}.tmp", path)
        images.append({"id": image_id, "file_name": name, "width": size, "height": size})
        _, other, _ = shape_example(index, seed + 1, size)  # the same class (label = index mod classes), other words
        annotations += [
            {"id": 2 * image_id, "image_id": image_id, "caption": caption},
            {"id": 2 * image_id + 1, "image_id": image_id, "caption": other},
        ]
    _write_text(captions_file, json.dumps({"images": images, "annotations": annotations}))
