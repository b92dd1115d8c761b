"""A small SQuAD v1.1-format file made offline, for the T5 quick start and the tiny pipelines' tests.

    write_sample_squad(Path("data/squad_data/v1.1/train-v1.1.json"), questions=512)

Each paragraph states the colour of a thing, between two sentences about other things ("the hat is old . the river
is green . the door is near ."), and its question asks for it ("what colour is the river ?"): the answer is a word
of the paragraph, with its character offset as SQuAD records it. A tiny T5 learns to answer these in about a
hundred steps: the quick start's fine-tuning and
evaluation then show scores that move, where real SQuAD would need a real model. The numbers say nothing about
SQuAD itself, whose files go to the same place for a real run.

The questions are a function of the file name and the count only (a seeded generator), so reruns and the
evaluation job see exactly the questions the fine-tuning job saw.
"""

import json
import os
import random
import zlib
from pathlib import Path
from typing import Any

THINGS = (
    "river",
    "door",
    "ship",
    "house",
    "bird",
    "car",
    "lamp",
    "hat",
    "tree",
    "stone",
    "cup",
    "coat",
    "wall",
    "boat",
    "book",
    "chair",
    "flag",
    "kite",
    "road",
    "fish",
)
COLOURS = ("red", "green", "blue", "black", "white", "yellow", "brown", "grey")
STATES = ("old", "new", "near", "far", "small", "large", "open", "closed")  # never an answer


def sample_squad_document(questions: int, seed: int) -> dict[str, Any]:
    generator = random.Random(seed)
    paragraphs: list[dict[str, Any]] = []
    for index in range(questions):
        before, asked, after = generator.sample(THINGS, 3)
        answer = generator.choice(COLOURS)
        lead = f"the {before} is {generator.choice(STATES)} . the {asked} is "
        context = f"{lead}{answer} . the {after} is {generator.choice(STATES)} ."
        start = len(lead)
        paragraphs.append(
            {
                "context": context,
                "qas": [
                    {
                        "id": f"sample-{seed:08x}-{index}",
                        "question": f"what colour is the {asked} ?",
                        "answers": [{"text": answer, "answer_start": start}],
                    }
                ],
            }
        )
    return {"version": "1.1", "data": [{"title": "colours", "paragraphs": paragraphs}]}


def write_sample_squad(path: Path, questions: int) -> None:
    """Writes the file (under a temporary name, then renamed) unless it exists already."""
    path = Path(path)
    if path.is_file():
        return
    document = sample_squad_document(questions, seed=zlib.crc32(path.name.encode()))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(document), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
