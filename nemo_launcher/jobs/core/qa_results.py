"""The files and the table a question-answering evaluation leaves behind, for every family that scores answers.

    write_jsonl(results / "squad_predictions.jsonl", [{"prediction": ..., "answers": [...]}, ...], "evaluation")
    write_json(results / "qa_metrics.json", {"squad": {"exact_match": 81.0, "f1": 84.2, "examples": 64}}, "evaluation")
    print(results_table(scores))

    def main(argv=None) -> int:             # a program's whole main(): lock, evaluate, table, summary, exit code
        return run_evaluation(argv, PROG, Config.from_dict, evaluate, lambda cfg: cfg.model.restore_from_path)

Each file is written beside its place and renamed, so a reader never sees half of it, and a full or read-only file
system ends the job with the storage exit code and an advice line naming the stage's results_dir key.
"""

import json
import time
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

from ..common.qa_metrics import average_over_files


def _advice(path: Path, stage: str) -> str:
    return (
        f"Nothing was written to {path}. Free space there, or point {stage}.run.results_dir (or "
        f"base_results_dir) at a larger file system, then run the {stage} again."
    )


def write_text(path: Path, text: str, stage: str) -> None:
    from ..common.storage import guarded_write

    path = Path(path)
    data = text.encode("utf-8")
    with guarded_write(path.parent, len(data), path.name, _advice(path, stage)):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(data)
        partial.replace(path)


def write_jsonl(path: Path, records: Iterable[dict], stage: str) -> None:
    write_text(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), stage)


def write_json(path: Path, value: dict, stage: str) -> None:
    write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n", stage)


def with_average(results: dict[str, dict], names: Sequence[str], average: str | None) -> dict[str, dict]:
    """`results` ({file: {score: %, "examples": n}}) plus an "average" row when there are several files: micro
    weighs every question alike, macro (and null) every file alike."""
    if len(results) < 2:
        return results
    row = {
        name: average_over_files({k: (v["examples"], v[name]) for k, v in results.items()}, average) for name in names
    }
    row["examples"] = sum(v["examples"] for v in results.values())
    return {**results, "average": row}


def results_table(results: dict[str, dict]) -> str:
    names = list(results)
    scores = [key for key in next(iter(results.values())) if key != "examples"]
    width = max(len(name) for name in names + ["task"])
    lines = [f"{'task'.ljust(width)}  " + "  ".join(f"{s:>18}" for s in scores) + f"  {'examples':>8}"]
    for name in names:
        row = results[name]
        lines.append(
            f"{name.ljust(width)}  " + "  ".join(f"{row[s]:>18.2f}" for s in scores) + f"  {row['examples']:>8}"
        )
    return "\n".join(lines)


def gathered(local: dict[int, str], world_size: int) -> dict[int, str]:
    """Every rank's {question number: prediction}, merged (tensor-parallel ranks hold the same ones)."""
    if world_size == 1:
        return local
    import torch

    everyone: list[dict[int, str]] = [{} for _ in range(world_size)]
    torch.distributed.all_gather_object(everyone, local)
    return {number: text for part in everyone for number, text in part.items()}


def run_evaluation(
    argv: list[str] | None,
    prog: str,
    bind: Callable[[dict], Any],
    evaluate: Callable[[Any, Any], dict[str, dict]],
    described: Callable[[Any], str],
) -> int:
    """The main() of a question-answering evaluation program: binds the resolved section, holds run.results_dir's
    lock, runs `evaluate(cfg, placement)` (which writes the files), prints the table and the closing summary
    (`described(cfg)` names what was evaluated). Returns the exit code."""
    from ..common.config import JobConfigError
    from ..common.report import JobFault, Summary, duration, print_error
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        with claimed_run(argv, prog, bind, attrgetter("run.results_dir")) as (cfg, placement):
            try:
                results = evaluate(cfg, placement)
            finally:
                from .parts import shutdown

                shutdown()
        if placement.rank == 0:
            print(results_table(results), flush=True)
        summary = Summary(f"evaluation finished: {described(cfg)}")
        summary.add("results", cfg.results_file).add("predictions", cfg.predictions_file("<name>"))
        summary.add("time", duration(time.monotonic() - started)).show(placement.rank)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0
