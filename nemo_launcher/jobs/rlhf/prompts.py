"""PPO's prompts: read from a prompts file of contract/preference_data.py, and handed out in an order fixed by the seed.

    prompts = read_prompts(pd.prompts_file(data_dir, "train"), vocab_size=tokenizer.vocab_size)
    order = PromptOrder(len(prompts), seed=1234)
    rows = order.take(position=step * 32, count=32)     # indices into prompts; the run's position is step * count

The order is a fresh permutation of all prompts per pass over the file, each drawn from the seed and the pass number,
and the position in it is a plain counter: a resumed run finds the same prompts for step N from N alone (the
checkpoint stores the position too, for the record and to catch a changed batch size).
"""

import json
import random
from dataclasses import dataclass
from pathlib import Path

from ...contract import preference_data as pd
from ..common.config import JobConfigError


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    text: str


def read_prompts(path: str, vocab_size: int, key: str = "prompts file") -> list[Prompt]:
    """Every line's prompt ids and text; the data's tokenizer must be the model's (same vocabulary size)."""
    file = Path(path)
    if not file.is_file():
        raise JobConfigError(f"{key}: {path} does not exist; run the RLHF data preparation first (it writes it)")
    check_vocabulary(file.parent, vocab_size, key)
    prompts = []
    with open(file) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                ids = [int(token) for token in record["prompt"]]
            except (ValueError, KeyError, TypeError) as error:
                raise JobConfigError(f"{key}: {path} line {number} is not a prompt record ({error})") from None
            if not ids:
                raise JobConfigError(f"{key}: {path} line {number} has an empty prompt")
            prompts.append(Prompt(ids, str(record.get("text", ""))))
    if not prompts:
        raise JobConfigError(f"{key}: {path} holds no prompt")
    return prompts


def check_vocabulary(directory: Path, vocab_size: int, key: str) -> None:
    """Refuses ids from another tokenizer: metadata.json beside the data names the vocabulary size it used."""
    metadata = directory / pd.METADATA_FILE
    if not metadata.is_file():
        return
    data_vocab = json.loads(metadata.read_text()).get("tokenizer", {}).get("vocab_size")
    if data_vocab is not None and int(data_vocab) != vocab_size:
        raise JobConfigError(
            f"{key}: the data in {directory} was tokenized with a {data_vocab}-token vocabulary, the model's "
            f"tokenizer has {vocab_size}; prepare the data with the model's tokenizer"
        )


class PromptOrder:
    """Indices of `count` prompts in seeded passes over the file (a pass is a permutation drawn from seed and its
    number; a batch may run over into the next pass)."""

    def __init__(self, size: int, seed: int):
        if size < 1:
            raise ValueError("no prompts to order")
        self.size, self.seed = size, seed
        self._passes: dict[int, list[int]] = {}

    def _pass(self, number: int) -> list[int]:
        if number not in self._passes:
            order = list(range(self.size))
            random.Random(f"ppo-prompts-{self.seed}-{number}").shuffle(order)
            self._passes = {number: order}  # one pass at a time is all a run reads
        return self._passes[number]

    def take(self, position: int, count: int) -> list[int]:
        return [self._pass(p // self.size)[p % self.size] for p in range(position, position + count)]
