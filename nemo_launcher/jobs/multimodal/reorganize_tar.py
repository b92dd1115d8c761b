"""reorganize_tar: repack the downloaded tars into tars of exactly tar_chunk_size examples (the last one holds the
rest).

    python3 -u -m nemo_launcher.jobs.multimodal.reorganize_tar --config <job dir>/<run.name>_hydra.yaml

Examples are numbered in the order of the input tars (sorted by name) and of their members; output tar j holds
examples j*C .. (j+1)*C-1 as <output_dir>/<j>.tar, keys renumbered to the example number, with only the members
file_ext_in_tar lists (an example missing one is left out). The counts come from the tar headers, so every task
computes the same numbering alone; task t of T writes its contiguous share
of the output tars. The plan (inputs, counts, chunk size) is kept in <output_dir>/reorganize_plan.json; a rerun
writes only the tars that are missing, and refuses an output folder planned from other inputs.
"""

import json
import logging
import os

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.step_report import StepReport
from .config import array_tasks, load_config, share
from .progress import Progress
from .tars import AtomicTar, complete, count_examples, examples, tar_files

log = logging.getLogger("multimodal.reorganize_tar")
PLAN = "reorganize_plan.json"


def input_counts(folder: str, extensions: list[str]) -> list[list]:
    """[[tar name, examples holding every extension], ...] for the input tars, sorted by name (from tar headers)."""
    return [[name, count_examples(os.path.join(folder, name), extensions)] for name in tar_files(folder)]


def make_plan(input_dir: str, output_dir: str, chunk: int, extensions: list[str]) -> dict:
    plan = {
        "input_dir": os.path.abspath(input_dir),
        "tar_chunk_size": chunk,
        "file_ext_in_tar": list(extensions),
        "inputs": input_counts(input_dir, extensions),
    }
    total = sum(count for _, count in plan["inputs"])
    plan["total_examples"] = total
    plan["outputs"] = [f"{number:06d}.tar" for number in range((total + chunk - 1) // chunk)]
    path = os.path.join(output_dir, PLAN)
    if os.path.isfile(path):
        with open(path) as handle:
            earlier = json.load(handle)
        if earlier != plan:
            raise DataPrepError(
                f"data_preparation.reorganize_tar.output_dir={output_dir!r} holds tars planned from other "
                f"inputs or settings ({PLAN} differs); empty it, or choose another output_dir"
            )
    else:
        os.makedirs(output_dir, exist_ok=True)
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "w") as handle:
            json.dump(plan, handle, indent=1)
        os.replace(temporary, path)
    return plan


def write_chunks(plan: dict, output_dir: str, numbers: list[int], progress: Progress, report: StepReport) -> None:
    """Writes output tars `numbers` (consecutive), reading only the input tars that hold their examples."""
    chunk, extensions = plan["tar_chunk_size"], plan["file_ext_in_tar"]
    first, end = numbers[0] * chunk, min(plan["total_examples"], (numbers[-1] + 1) * chunk)
    stream = _examples_from(plan, first, end)
    for number in numbers:
        path = os.path.join(output_dir, plan["outputs"][number])
        wanted = min(chunk, plan["total_examples"] - number * chunk)
        if os.path.isfile(path):
            for _ in range(wanted):
                next(stream)
            report.kept(number, output=path)
            continue
        with AtomicTar(path) as tar:
            for index in range(number * chunk, number * chunk + wanted):
                members = next(stream)
                sample = {"__key__": f"{index:09d}"}
                sample.update({ext[1:]: members[ext] for ext in extensions})
                tar.write(sample)
                progress.advance()
        report.done(number, output=path, size_bytes=os.path.getsize(path))


def _examples_from(plan: dict, first: int, end: int):
    """The complete examples first .. end-1 of the numbering, read tar after tar from the first one needed."""
    position = 0
    for name, count in plan["inputs"]:
        if position + count <= first:
            position += count
            continue
        for _, members in examples(os.path.join(plan["input_dir"], name)):
            if not complete(members, plan["file_ext_in_tar"]):
                continue
            if position >= end:
                return
            if position >= first:
                yield members
            position += 1
        if position >= end:
            return
    if position < end:
        raise DataPrepError(
            f"data_preparation.reorganize_tar.input_dir={plan['input_dir']!r}: the tars hold {position} "
            f"complete examples, fewer than their records say; rerun download_images"
        )


def main(argv=None) -> StepReport:
    cfg = load_config("reorganize_tar", argv)
    step = cfg.reorganize_tar
    report = StepReport("reorganize_tar", unit="tar", size_label="written")
    plan = make_plan(step.input_dir, step.output_dir, step.tar_chunk_size, step.file_ext_in_tar)
    if not plan["inputs"]:
        raise DataPrepError(
            f"data_preparation.reorganize_tar.input_dir={step.input_dir!r}: no .tar files; run download_images first"
        )
    tasks, count = array_tasks(cfg, "reorganize_tar")
    numbers = [number for task in tasks for number in share(range(len(plan["outputs"])), task, count)]
    progress = Progress("reorganize_tar", len(numbers) * step.tar_chunk_size, "examples", cfg.progress)
    log.info(
        "tasks %s of %d: output tars %s of %d (%d examples in %d input tars)",
        tasks,
        count,
        f"{numbers[0]}-{numbers[-1]}" if numbers else "none",
        len(plan["outputs"]),
        plan["total_examples"],
        len(plan["inputs"]),
    )
    # Each task's share is consecutive; several tasks run here one after another.
    for task in tasks:
        mine = share(range(len(plan["outputs"])), task, count)
        if mine:
            write_chunks(plan, step.output_dir, mine, progress, report)
    report.note("dataset", f"{plan['total_examples']} examples in {len(plan['outputs'])} tars of {step.tar_chunk_size}")
    return report


if __name__ == "__main__":
    run_step(main)
