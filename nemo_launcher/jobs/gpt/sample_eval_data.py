"""Small evaluation files in lm-eval's formats, made offline from local text, for the quick start.

    python3 -m nemo_launcher.jobs.gpt.sample_eval_data --data-dir data
    -> data/eval_harness_data/lambada/test.jsonl        {"text": passage whose last word is the target}
    -> data/eval_harness_data/wikitext2/test.jsonl      {"page": " = Title = \\n text ..."}
    -> data/eval_harness_data/wikitext103/test.jsonl

The text is Debian's /usr/share/common-licenses, as for the sample training corpus (sample_data.py), so
`evaluation=gpt3/evaluate_lambada` (or run.tasks=[lambada,wikitext2,wikitext103]) runs with default paths
where the real task data cannot be downloaded. These are smoke-test files: the numbers say nothing
about the published benchmarks, whose data must be put in the same places for real evaluations.
"""

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from ..common.sample_data import LICENSES_DIR, license_documents

PASSAGE_WORDS = 24  # lambada passages are a few sentences; ours stay within the tiny model's 128 tokens


def lambada_rows(documents: Iterable[str], count: int) -> list[dict]:
    rows = []
    for text in documents:
        words = text.split()
        if len(words) >= PASSAGE_WORDS and words[PASSAGE_WORDS - 1].isalpha():
            rows.append({"text": " ".join(words[:PASSAGE_WORDS])})
        if len(rows) == count:
            break
    return rows


def wikitext_rows(folder: Path, count: int) -> list[dict]:
    """Whole license files as documents, with wikitext's ` = Title = ` heading."""
    files = sorted(p for p in folder.iterdir() if p.is_file())[:count]
    return [
        {"page": f" = {p.name} = \n " + " ".join(p.read_text(errors="replace").split()[:400]) + " \n"} for p in files
    ]


def write_sample_eval_data(
    data_dir: Path, lambada_count: int = 200, wikitext_count: int = 4, root: Path = None
) -> Path:
    """Writes the files under `root` (default: <data_dir>/eval_harness_data, where evaluation looks)."""
    root = Path(root) if root is not None else data_dir / "eval_harness_data"
    outputs = {
        "lambada/test.jsonl": lambada_rows(license_documents(), lambada_count),
        "wikitext2/test.jsonl": wikitext_rows(LICENSES_DIR, wikitext_count),
        "wikitext103/test.jsonl": wikitext_rows(LICENSES_DIR, wikitext_count),
    }
    for relative, rows in outputs.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        temporary.replace(path)
    return root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m nemo_launcher.jobs.gpt.sample_eval_data", description=__doc__.split("\n")[0]
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--data-dir", type=Path, help="the launcher's data_dir (files go to <data_dir>/eval_harness_data)"
    )
    where.add_argument("--task-data-dir", type=Path, help="the evaluation's run.task_data_dir itself")
    args = parser.parse_args(argv)
    from ..common.quiet import start_job
    from ..common.report import Summary, size, size_of

    start_job(accelerators=False)
    root = write_sample_eval_data(args.data_dir, root=args.task_data_dir)
    summary = Summary(f"sample evaluation data written (smoke-test files, not the published benchmarks): {root}")
    for task in sorted(p.name for p in root.iterdir() if (p / "test.jsonl").is_file()):
        path = root / task / "test.jsonl"
        with open(path, encoding="utf-8") as handle:
            rows = sum(1 for _ in handle)
        summary.add(task, f"{path} ({rows} rows, {size(size_of(path))})")
    summary.show(rank=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
