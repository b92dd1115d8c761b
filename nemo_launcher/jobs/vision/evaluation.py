"""The vision evaluations: a `.nemo` scored on a folder in ImageNet's class layout, one process, results JSON and a
printed table. The programs are jobs/vit/evaluate.py (top-1 and top-5 of the classifier's logits) and
jobs/clip/zeroshot.py (CLIP's zero-shot top-1: logits are the scaled cosines between an image and each class's
prompts).

    return run_vision_evaluation(argv, PROG, VitEvaluationConfig, classifier_logits)

`logits_for(cfg, saved, classes)` returns a function from a pixel batch to logits over `classes` (in the folder's
sorted order, the labels ClassFolders gives); everything else (binding, the run lock, reading and centre-cropping
the images as validation does, the counts, the files, the exit codes) is here.
"""

import time
from collections.abc import Callable, Sequence

import torch

from ..common.config import JobConfigError

TOP_K = (1, 5)


def top_k_correct(logits: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]) -> dict[int, int]:
    """How many rows have their label among the k largest logits, for each k (k above the class count: all)."""
    ranked = logits.argsort(dim=1, descending=True)
    hits = ranked == labels.unsqueeze(1)
    return {k: int(hits[:, :k].any(dim=1).sum()) for k in ks}


def score_folder(cfg, saved, classes: list[str] | None, logits_for) -> dict:
    """{"top1": %, "top5": %, "images": n, "classes": c, "chance_top1": %} over every image of the folder."""
    from .class_folders import ClassFolderImages, ClassFolders

    key = "model.data.imagenet_val"
    folders = ClassFolders(cfg.model.data.imagenet_val, classes, key=key)
    images = ClassFolderImages(folders, len(folders), saved.image_size, saved.mean, saved.std, 0, None)
    loader = torch.utils.data.DataLoader(
        images, batch_size=cfg.model.micro_batch_size, shuffle=False, num_workers=cfg.model.data.num_workers
    )
    logits_of = logits_for(cfg, saved, folders.classes)
    ks = [k for k in TOP_K if k <= len(folders.classes)]
    correct = {k: 0 for k in ks}
    for batch in loader:
        labels = batch["labels"].to(saved.device)
        for k, hits in top_k_correct(logits_of(batch["images"]), labels, ks).items():
            correct[k] += hits
    total = len(folders)
    scores = {f"top{k}": 100.0 * correct[k] / total for k in ks}
    return {**scores, "images": total, "classes": len(folders.classes), "chance_top1": 100.0 / len(folders.classes)}


def results_table(task: str, scores: dict) -> str:
    names = [name for name in scores if name.startswith("top")]
    header = f"{'task':<20}" + "".join(f"{name:>10}" for name in names) + f"{'chance top1':>14}{'images':>10}"
    row = (
        f"{task:<20}"
        + "".join(f"{scores[name]:>10.2f}" for name in names)
        + f"{scores['chance_top1']:>14.2f}{scores['images']:>10}"
    )
    return f"{header}\n{row}"


def run_vision_evaluation(
    argv,
    prog: str,
    schema,
    logits_for: Callable,
    family: str,
    classes_of: Callable = lambda cfg, saved: saved.class_names,
) -> int:
    """The program: bind, hold run.results_dir's lock, load the .nemo, score the folder, write and print."""
    from ..common.config import config_path_from_argv, load_resolved_config
    from ..common.distributed import placement_from_env
    from ..common.quiet import start_job
    from ..common.report import JobFault, Summary, duration, print_error
    from ..common.run_directory import claimed
    from ..core.qa_results import write_json

    started = time.monotonic()
    try:
        path = config_path_from_argv(argv, prog=prog)
        placement = placement_from_env()
        start_job(placement.rank)
        cfg = schema.from_dict(load_resolved_config(path))
        with claimed(cfg.run.results_dir, placement.rank, placement.world_size):
            from ..core.parts import shutdown
            from .saved_models import load_vision_model

            try:
                saved = load_vision_model(cfg.model.restore_from_path, cfg.model.precision_name())
                if saved.family != family:
                    raise JobConfigError(
                        f"model.restore_from_path: {cfg.model.restore_from_path} holds a {saved.family} "
                        f"model; this evaluation scores {family} models"
                    )
                scores = score_folder(cfg, saved, classes_of(cfg, saved), logits_for)
            finally:
                shutdown()
            result = {
                "task": cfg.run.task_name,
                "model": cfg.model.restore_from_path,
                "data": cfg.model.data.imagenet_val,
                "precision": saved.precision,
                **scores,
            }
            write_json(cfg.results_file, result, "evaluation")
        print(results_table(cfg.run.task_name, scores), flush=True)
        summary = Summary(f"evaluation finished: {cfg.model.restore_from_path}")
        summary.add("results", cfg.results_file).add("time", duration(time.monotonic() - started)).show(placement.rank)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0
