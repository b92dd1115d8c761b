"""SQuAD v1.1 JSON -> the jsonl that supervised fine-tuning, or prompt learning, adapters and IA3, read.

    python3 -u -m nemo_launcher.jobs.data.squad --config <job dir>/<run.name>_hydra.yaml

Reads the `squad_preparation` section of a resolved fine_tuning or peft config:

    squad_preparation:
      train:      {source: .../train-v1.1.json, output: .../train-v1.1_gpt.jsonl}
      validation: {source: .../dev-v1.1.json,   output: .../dev-v1.1_gpt.jsonl}

and writes one line per question:

    {"input": "Context: <paragraph>\\nQuestion: <question>", "output": "<first answer>", "answers": [<all answers>]}

With `layout: prompt_learning` (the prompt_learning, adapter_learning and ia3_learning stages, and their
evaluations, which also name a `test` split) the lines are in the prompt-learning format instead, the fields the
task template names:

    {"taskname": "squad", "context": "<paragraph>", "question": "<question>", "answer": "<first answer>",
     "answers": [...]}

An output that already exists is kept, so reruns and later jobs on the same data_dir reuse it. A new one is
written under a temporary name and renamed when complete, so a killed job never leaves a half-written file
that the next run would trust. Standard library only (plus the YAML reader): it runs before any GPU work.
"""

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
from .sample_squad import write_sample_squad

log = logging.getLogger("nemo_launcher.jobs.data.squad")  # not __name__: run as a program, that is __main__
SPLITS = ("train", "validation", "test")
LAYOUTS = ("prompt_answer", "prompt_learning")


def squad_questions(document: dict[str, Any], source: str = "<json>") -> Iterator[tuple[str, str, list[str]]]:
    """(paragraph, question, every answer) of each answerable question of a parsed SQuAD file, in file order,
    texts as published. Unanswerable questions (SQuAD 2.0's `is_impossible`) have no answer to learn and are skipped."""
    articles = document.get("data") if isinstance(document, dict) else None
    if not isinstance(articles, list):
        raise JobConfigError(f'{source}: not a SQuAD file (expected {{"version": ..., "data": [articles]}})')
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{source}: data[{a}].paragraphs[{p}]"
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise JobConfigError(f"{where}.context: expected text, got {context!r}")
            for q, qa in enumerate(paragraph.get("qas", [])):
                question = qa.get("question")
                if not isinstance(question, str):
                    raise JobConfigError(f"{where}.qas[{q}].question: expected text, got {question!r}")
                answers = [answer.get("text") for answer in qa.get("answers", [])]
                if qa.get("is_impossible") or not answers:
                    continue
                if not all(isinstance(text, str) for text in answers):
                    raise JobConfigError(f"{where}.qas[{q}].answers: every answer needs a text")
                yield context, question, answers


def squad_examples(document: dict[str, Any], source: str = "<json>") -> Iterator[dict[str, Any]]:
    """Prompt/answer records of a parsed SQuAD file, in file order (see squad_questions)."""
    for context, question, answers in squad_questions(document, source):
        yield {
            "input": f"Context: {context.strip()}\nQuestion: {question.strip()}",
            "output": answers[0].strip(),
            "answers": [text.strip() for text in answers],
        }


def prompt_learning_examples(document: dict[str, Any], source: str = "<json>") -> Iterator[dict[str, Any]]:
    """Records in the prompt-learning format (task `squad`), in file order (see squad_questions)."""
    for context, question, answers in squad_questions(document, source):
        texts = [text.strip() for text in answers]
        yield {
            "taskname": "squad",
            "context": context.strip(),
            "question": question.strip(),
            "answer": texts[0],
            "answers": texts,
        }


def read_squad_source(source: Path, sample_questions: int | None, what: str) -> dict[str, Any]:
    """The parsed SQuAD-format JSON file `source` (its `squad_preparation` entry names it; `what` says in the
    message what to copy there). With sample_questions, a missing `source` is first written with that many generated
    questions (the tiny pipelines' stand-in)."""
    if sample_questions is not None:
        write_sample_squad(source, sample_questions)
    if not source.is_file():
        raise JobConfigError(
            f"{source}: no such file. Nothing is downloaded here: copy {what} "
            f"({source.name}, as published) there, or point squad_preparation at it"
        )
    with open(source, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise JobConfigError(f"{source}: not valid JSON ({error})") from None


def convert(source: Path, output: Path, layout: str = "prompt_answer", sample_questions: int | None = None) -> int:
    """Writes `output` from `source` unless it exists; returns the number of lines it holds. With sample_questions,
    a missing `source` is first written with that many generated questions (the tiny pipelines' stand-in)."""
    if output.is_file():
        with open(output, encoding="utf-8") as handle:
            count = sum(1 for line in handle if line.strip())
        log.info("%s exists (%d samples); kept", output, count)
        return count
    document = read_squad_source(source, sample_questions, "SQuAD v1.1")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    count = 0
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            records = prompt_learning_examples if layout == "prompt_learning" else squad_examples
            for record in records(document, str(source)):
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        if count == 0:
            raise JobConfigError(f"{source}: holds no answerable question")
        os.replace(partial, output)
    finally:
        if partial.exists():
            partial.unlink()
    log.info("%s -> %s (%d samples)", source, output, count)
    return count


def prepare(section: dict[str, Any] | None, key: str = "squad_preparation") -> dict[str, int]:
    """Converts every split the section names; returns {split: samples}."""
    if not isinstance(section, dict):
        raise JobConfigError(f"{key}: expected a section with train/validation {{source, output}}, got {section!r}")
    section = dict(section)
    layout = section.pop("layout", "prompt_answer")
    if layout not in LAYOUTS:
        raise JobConfigError(f"{key}.layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    unknown = sorted(set(section) - set(SPLITS))
    if unknown:
        raise JobConfigError(f"{key}.{unknown[0]}: unknown split; valid splits: {', '.join(SPLITS)}")
    counts = {}
    for split, paths in section.items():
        if paths is None:
            continue
        if not isinstance(paths, dict) or not paths.get("source") or not paths.get("output"):
            raise JobConfigError(f"{key}.{split}: needs source (SQuAD JSON) and output (jsonl) paths, got {paths!r}")
        counts[split] = convert(Path(paths["source"]), Path(paths["output"]), layout, paths.get("sample_questions"))
    return counts


def main(argv: list[str] | None = None) -> int:
    from ..common.quiet import start_job
    from ..common.report import Summary, duration, print_error

    started = time.monotonic()
    start_job(accelerators=False)
    try:
        config = load_resolved_config(config_path_from_argv(argv, prog="python3 -m nemo_launcher.jobs.data.squad"))
        section = config.get("squad_preparation")
        counts = prepare(section)
    except JobConfigError as error:
        return print_error(error)
    summary = Summary(f"squad preparation finished: {len(counts)} splits")
    for split, samples in counts.items():
        summary.add(split, f"{section[split]['output']} ({samples} samples)")
    summary.add("time", duration(time.monotonic() - started)).show(rank=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
