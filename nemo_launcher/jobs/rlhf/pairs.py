"""Comparison pairs as the pairwise trainers read them (reward model, DPO): the pairs file, a dataset of pairs and a
collate that keeps both responses of a pair in one micro-batch.

    check_vocabulary(path, tokenizer.vocab_size, "model.data.data_prefix.train")   # metadata.json beside the file
    pairs = read_pairs(path, vocab_size, max_seq_length, "model.encoder_seq_length")
    dataset = PairsDataset(pairs)                      # item i: pair i (a micro-batch size counts pairs)
    batch = collate_pairs([dataset[i] for i in range(m)], pad_id=tokenizer.eod)

A micro-batch of m pairs is 2m sequences: rows 0..m-1 are the chosen samples (prompt + chosen response), rows
m..2m-1 the rejected ones, row m+i the partner of row i (`split_pairs` cuts a per-row tensor back into the two
halves). Sequences are padded on the right with `pad_id` to the longest of the batch; attention is causal, so the
padding never changes a position before a row's length. The batch holds:

| key            | shape, dtype        | what                                                                        |
|----------------|---------------------|-----------------------------------------------------------------------------|
| tokens         | [2m, s] long        | prompt then response ids, padded                                            |
| position_ids   | [2m, s] long        | 0..s-1 on every row                                                         |
| lengths        | [2m] long           | real tokens per row (the last real one, at lengths-1, is a reward's token)  |
| prompt_lengths | [2m] long           | prompt tokens per row: the response is positions prompt_length..length-1    |
| response_mask  | [2m, s] float       | 1 where the token at that position belongs to the response, else 0          |
| ref_logps      | [2m] float          | only when every pair has them (the DPO reference job's fields): the        |
|                |                     | reference's summed response log-probs, chosen rows then rejected rows       |

A language model's log-prob of the token at position t comes from its logits at t-1, so the summed response
log-prob of a row is `(token_logps * response_mask[:, 1:]).sum(-1)` with token_logps[:, t-1] = log p(tokens[:, t]).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...contract.preference_data import METADATA_FILE, REFERENCE_FIELDS
from ..common.config import JobConfigError

RESPONSE_KEYS = ("chosen", "rejected")


@dataclass(frozen=True)
class Pair:
    """One comparison: the prompt ids and the preferred and dispreferred response ids (each ending with the
    tokenizer's end-of-document id); with the reference's summed response log-probs when the file carries them."""

    prompt: tuple[int, ...]
    chosen: tuple[int, ...]
    rejected: tuple[int, ...]
    ref_chosen: float | None = None
    ref_rejected: float | None = None

    @property
    def longest(self) -> int:
        return len(self.prompt) + max(len(self.chosen), len(self.rejected))


def check_vocabulary(path: str, vocab_size: int, key: str) -> None:
    """Refuses a pairs file tokenized with another vocabulary than the model's: metadata.json beside it names the
    tokenizer (a copy written elsewhere, such as DPO's reference file, has none; its ids are still range-checked by
    read_pairs)."""
    metadata = Path(path).parent / METADATA_FILE
    if not metadata.is_file():
        return
    try:
        tokenizer = json.loads(metadata.read_text()).get("tokenizer") or {}
    except (json.JSONDecodeError, AttributeError):
        raise JobConfigError(f"{metadata}: not a JSON object (the preference set's metadata)") from None
    size = tokenizer.get("vocab_size")
    if size is not None and int(size) != int(vocab_size):
        raise JobConfigError(
            f"{key}={path}: the pairs were tokenized with a vocabulary of {size} ids ({metadata}), the model's "
            f"tokenizer has {vocab_size}; prepare the preference data with the model's tokenizer"
        )


def read_pairs(path: str, vocab_size: int, max_seq_length: int, length_key: str) -> list[Pair]:
    """Every line of a pairs file, checked: three lists of ids below vocab_size, non-empty responses, and prompt plus
    the longer response within max_seq_length (a longer pair is refused, not cut: cutting would drop the response's
    last token, which is the one a reward model scores). length_key names the setting to raise in that message."""
    if not Path(path).is_file():
        raise JobConfigError(f"{path}: no such pairs file")
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if text.strip():
                pairs.append(_pair(path, number, text, vocab_size, max_seq_length, length_key))
    if not pairs:
        raise JobConfigError(f"{path}: holds no pair")
    with_reference = sum(pair.ref_chosen is not None for pair in pairs)
    if 0 < with_reference < len(pairs):
        raise JobConfigError(
            f"{path}: {with_reference} of {len(pairs)} pairs carry {' and '.join(REFERENCE_FIELDS)}; a reference "
            "file has them on every line (write it again with the reference job)"
        )
    return pairs


def _pair(path: str, number: int, text: str, vocab_size: int, max_seq_length: int, length_key: str) -> Pair:
    where = f"{path}:{number}"
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise JobConfigError(f"{where}: not a JSON object ({error.msg})") from None
    if not isinstance(record, dict):
        raise JobConfigError(f"{where}: not a JSON object")
    ids = {}
    for name in ("prompt", *RESPONSE_KEYS):
        value = record.get(name)
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            raise JobConfigError(f"{where}: {name!r} must be a list of token ids (the preference data format)")
        if any(not 0 <= i < vocab_size for i in value):
            raise JobConfigError(
                f"{where}: {name!r} holds an id outside the model's vocabulary of {vocab_size}; prepare the data "
                "with the model's tokenizer"
            )
        ids[name] = tuple(value)
    for name in RESPONSE_KEYS:
        if not ids[name]:
            raise JobConfigError(f"{where}: {name!r} is empty; every response has at least its end-of-document id")
    pair = Pair(ids["prompt"], ids["chosen"], ids["rejected"], *_reference(where, record))
    if pair.longest > max_seq_length:
        raise JobConfigError(
            f"{where}: prompt and response take {pair.longest} tokens, more than {length_key}={max_seq_length}; "
            f"raise {length_key} or leave such pairs out of the data"
        )
    return pair


def _reference(where: str, record: dict) -> tuple[float | None, float | None]:
    present = [name in record for name in REFERENCE_FIELDS]
    if not any(present):
        return None, None
    values = [record.get(name) for name in REFERENCE_FIELDS]
    if not all(present) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise JobConfigError(f"{where}: {' and '.join(REFERENCE_FIELDS)} must both be numbers")
    return float(values[0]), float(values[1])


class PairsDataset(torch.utils.data.Dataset):
    """Item i is pair i, so the trainer's micro-batch size counts pairs and a pair is never split."""

    def __init__(self, pairs: Sequence[Pair]):
        self.pairs = list(pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Pair:
        return self.pairs[index]


class RepeatedPairs(torch.utils.data.Dataset):
    """`size` items drawn from the pairs: whole shuffled passes (epochs), each a fresh permutation of a seeded
    generator, so a run of any length sees every pair equally often and the order depends on the seed alone."""

    def __init__(self, pairs: Sequence[Pair], size: int, seed: int):
        self.pairs = list(pairs)
        generator = torch.Generator().manual_seed(seed)
        passes = -(-size // len(self.pairs))
        order = torch.cat([torch.randperm(len(self.pairs), generator=generator) for _ in range(passes)])
        self.order = order[:size].tolist()

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index: int) -> Pair:
        return self.pairs[self.order[index]]


def collate_pairs(pairs: Sequence[Pair], pad_id: int) -> dict[str, torch.Tensor]:
    """m pairs -> the batch of 2m rows described in the module docstring (chosen rows first)."""
    rows = [pair.prompt + pair.chosen for pair in pairs] + [pair.prompt + pair.rejected for pair in pairs]
    prompts = [len(pair.prompt) for pair in pairs] * 2
    width = max(len(row) for row in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    response_mask = torch.zeros(len(rows), width)
    for index, row in enumerate(rows):
        tokens[index, : len(row)] = torch.tensor(row, dtype=torch.long)
        response_mask[index, prompts[index] : len(row)] = 1.0
    batch = {
        "tokens": tokens,
        "position_ids": torch.arange(width).expand(len(rows), width).contiguous(),
        "lengths": torch.tensor([len(row) for row in rows], dtype=torch.long),
        "prompt_lengths": torch.tensor(prompts, dtype=torch.long),
        "response_mask": response_mask,
    }
    if pairs and all(pair.ref_chosen is not None for pair in pairs):
        references = [pair.ref_chosen for pair in pairs] + [pair.ref_rejected for pair in pairs]
        batch["ref_logps"] = torch.tensor(references, dtype=torch.float32)
    return batch


def split_pairs(per_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen half, rejected half) of a tensor with one entry per row of a collated batch (first dimension 2m)."""
    if per_row.shape[0] % 2:
        raise ValueError(f"a batch of pairs has an even number of rows, this tensor has {per_row.shape[0]}")
    half = per_row.shape[0] // 2
    return per_row[:half], per_row[half:]


def split_pair_microbatches(batch: dict[str, torch.Tensor], micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
    """A step's collated batch of k pairs (2k rows, chosen then rejected) -> k / micro_batch_size micro-batches of
    micro_batch_size pairs each, every one laid out like a collated batch (its chosen rows, then their partners): the
    trainer core's Recipe.split_microbatches for pairwise losses (a plain cut along rows would part the pairs)."""
    pairs = batch["tokens"].shape[0] // 2
    if pairs % micro_batch_size:
        raise ValueError(f"{pairs} pairs do not split into micro-batches of {micro_batch_size} pairs")
    microbatches = []
    for start in range(0, pairs, micro_batch_size):
        chosen = torch.arange(start, start + micro_batch_size)
        rows = torch.cat([chosen, chosen + pairs]).to(batch["tokens"].device)
        microbatches.append({key: value.index_select(0, rows) for key, value in batch.items()})
    return microbatches
