"""SQuAD v1.1-format JSON (SQuAD, XQuAD) -> the source/target text files T5 fine-tuning and evaluation read.

    python3 -u -m nemo_launcher.jobs.t5.squad_data --config <job dir>/<run.name>_hydra.yaml

Reads the `squad_preparation` list of a resolved fine_tuning or evaluation config (t5_finetuning.QaToText):

    squad_preparation:
      - {source: .../dev-v1.1.json, src_file_name: .../dev-v1.1_src.txt, tgt_file_name: .../dev-v1.1_tgt.txt,
         answers_file_name: .../dev-v1.1_answers.jsonl}

and writes, for each answerable question in file order, line i of each file:

    src      question: <question> context: <paragraph>          (T5's own reading-comprehension format)
    tgt      <the first answer>
    answers  ["<first answer>", "<second answer>", ...]        (JSON; SQuAD's dev set has several per question)

Line breaks and runs of whitespace inside a text become one space, so one line is one question. A file that
already exists is kept (reruns and later jobs reuse it); the files of one entry are written under temporary
names and renamed once all are complete, so a killed job leaves nothing a rerun would trust half-written.
Standard library only (plus the YAML reader): it runs before any GPU work.
"""

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...contract.schemas.t5_finetuning import QaToText
from ..common.config import JobConfigError, bind, config_path_from_argv, load_resolved_config
from ..data.squad import read_squad_source, squad_questions

KEY = "squad_preparation"


def one_line(text: str) -> str:
    return " ".join(text.split())


def text_pairs(document: dict[str, Any], source: str) -> Iterator[tuple[str, str, list[str]]]:
    """(source line, target line, every answer) per answerable question of a parsed SQuAD file."""
    for context, question, answers in squad_questions(document, source):
        answers = [one_line(answer) for answer in answers]
        yield f"question: {one_line(question)} context: {one_line(context)}", answers[0], answers


def _outputs(item: QaToText) -> list[Path]:
    return [Path(p) for p in (item.src_file_name, item.tgt_file_name, item.answers_file_name) if p is not None]


def convert(item: QaToText) -> tuple[int, bool]:
    """Writes the entry's files unless they all exist; returns (questions, written now)."""
    outputs = _outputs(item)
    if all(path.is_file() for path in outputs):
        with open(outputs[0], encoding="utf-8") as handle:
            return sum(1 for _ in handle), False
    source = Path(item.source)
    document = read_squad_source(source, item.sample_questions, "the SQuAD-format JSON")
    partials = [path.with_name(f".{path.name}.{os.getpid()}.partial") for path in outputs]
    count = 0
    try:
        for path in outputs:
            path.parent.mkdir(parents=True, exist_ok=True)
        handles = [open(path, "w", encoding="utf-8") for path in partials]
        try:
            for src, tgt, answers in text_pairs(document, str(source)):
                lines = [src, tgt, json.dumps(answers, ensure_ascii=False)][: len(handles)]
                for handle, line in zip(handles, lines):
                    handle.write(line + "\n")
                count += 1
        finally:
            for handle in handles:
                handle.close()
        if count == 0:
            raise JobConfigError(f"{source}: holds no answerable question")
        for partial, path in zip(partials, outputs):
            os.replace(partial, path)
    finally:
        for partial in partials:
            partial.unlink(missing_ok=True)
    return count, True


def prepare(config: dict[str, Any]) -> list[tuple[QaToText, int, bool]]:
    entries = config.get(KEY)
    if not isinstance(entries, list) or not entries:
        raise JobConfigError(
            f"{KEY}: expected a list of {{source, src_file_name, tgt_file_name}} entries, got {entries!r}"
        )
    items = [bind(QaToText, entry, f"{KEY}[{index}]") for index, entry in enumerate(entries)]
    return [(item, *convert(item)) for item in items]


def main(argv: list[str] | None = None) -> int:
    from ..common.quiet import start_job
    from ..common.report import Summary, duration, print_error

    started = time.monotonic()
    start_job(accelerators=False)
    try:
        done = prepare(
            load_resolved_config(config_path_from_argv(argv, prog="python3 -m nemo_launcher.jobs.t5.squad_data"))
        )
    except JobConfigError as error:
        return print_error(error)
    summary = Summary(f"squad preparation finished: {len(done)} files")
    for item, count, written in done:
        summary.add(
            Path(item.source).name, f"{count} questions -> {item.src_file_name} ({'written' if written else 'kept'})"
        )
    summary.add("time", duration(time.monotonic() - started)).show(rank=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
