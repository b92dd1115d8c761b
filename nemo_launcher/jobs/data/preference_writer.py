"""Writing a preference set: each split's pairs, prompts and SFT files, the tiny corpus, and metadata.json.

    begin_set(directory)                        # removes an earlier set's metadata.json and split files
    with SplitWriter(directory, "train", sft_responses="chosen") as split:
        split.add(record)                       # a TokenizedComparison: its pairs, SFT lines and (new) prompt
    split.counts                                # {"comparisons": .., "pairs": .., "prompts": .., "sft": .., ...}
    write_metadata(directory, {...})            # last: a set without metadata.json is incomplete

Files appear whole or not at all (written beside, then renamed), and the set is streamed: a split of a few hundred
thousand comparisons never sits in memory (its prompts are remembered by a 16-byte digest, to write each once).
"""

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ...contract import preference_data as pd
from ...contract.schemas.preference_preparation import sft_file
from .indexed_format import write_index
from .preference_records import TokenizedComparison


class _AtomicFile:
    """A text file written as <path>.tmp and renamed to <path> by commit()."""

    def __init__(self, path: str):
        self.path = path
        self.partial = f"{path}.tmp"
        self.handle = open(self.partial, "w", encoding="utf-8")

    def line(self, record: dict) -> None:
        self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def commit(self) -> None:
        self.handle.close()
        os.replace(self.partial, self.path)

    def discard(self) -> None:
        self.handle.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.partial)


def begin_set(directory: str) -> None:
    """Makes the folder and removes what an earlier run wrote there, metadata.json first (a rerun that stops
    half-way must not leave a set that looks complete, nor a split this run no longer writes)."""
    os.makedirs(directory, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(directory, pd.METADATA_FILE))
    for split in pd.SPLITS:
        for path in (pd.pairs_file(directory, split), pd.prompts_file(directory, split), sft_file(directory, split)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


class SplitWriter:
    """One split's <split>_pairs.jsonl and <split>_sft.jsonl, and with `prompts_from_pairs` its <split>_prompts.jsonl
    (each distinct prompt of the comparisons once, in order of appearance).

    sft_responses: "chosen" writes a comparison's best response, "all" every response. max_seq_length: a pair (or
    an SFT line) whose prompt and response tokens exceed it is left out and counted as too_long."""

    def __init__(
        self,
        directory: str,
        split: str,
        sft_responses: str,
        max_seq_length: int | None = None,
        prompts_from_pairs: bool = True,
    ):
        self.max_seq_length = max_seq_length
        self.sft_responses = sft_responses
        self.files = {
            "pairs": _AtomicFile(pd.pairs_file(directory, split)),
            "sft": _AtomicFile(sft_file(directory, split)),
        }
        if prompts_from_pairs:
            self.files["prompts"] = _AtomicFile(pd.prompts_file(directory, split))
        self.seen_prompts: set[bytes] = set()
        self.counts = dict(comparisons=0, pairs=0, sft=0, too_long=0) | ({"prompts": 0} if prompts_from_pairs else {})

    def __enter__(self) -> "SplitWriter":
        return self

    def __exit__(self, kind, error, trace) -> None:
        for file in self.files.values():
            if kind is None:
                file.commit()
            else:
                file.discard()

    def fits(self, prompt: list[int], *responses: list[int]) -> bool:
        return self.max_seq_length is None or len(prompt) + max(map(len, responses)) <= self.max_seq_length

    def add(self, record: TokenizedComparison) -> None:
        self.counts["comparisons"] += 1
        kept = 0
        for chosen, rejected in record.pairs():
            if not self.fits(record.prompt, chosen, rejected):
                self.counts["too_long"] += 1
                continue
            self.files["pairs"].line({"prompt": record.prompt, "chosen": chosen, "rejected": rejected})
            kept += 1
        self.counts["pairs"] += kept
        if not kept:
            return  # nothing of it is trained on: its prompt and answers stay out of the other files too
        sft = range(len(record.responses)) if self.sft_responses == "all" else range(1)
        for index in sft:
            if self.fits(record.prompt, record.responses[index]):
                # Without the response's leading blank: the SFT prompt templates put one between input and output.
                self.files["sft"].line({"input": record.prompt_text, "output": record.response_texts[index].lstrip()})
                self.counts["sft"] += 1
        if "prompts" in self.files:
            digest = hashlib.blake2b(np.asarray(record.prompt, dtype=np.int64).tobytes(), digest_size=16).digest()
            if digest not in self.seen_prompts:
                self.seen_prompts.add(digest)
                self.files["prompts"].line({"prompt": record.prompt, "text": record.prompt_text})
                self.counts["prompts"] += 1


def write_prompts(directory: str, split: str, texts: Iterable[str], tokenizer) -> int:
    """<split>_prompts.jsonl from prompt texts; returns how many."""
    file = _AtomicFile(pd.prompts_file(directory, split))
    count = 0
    try:
        for text in texts:
            file.line({"prompt": tokenizer.encode(text), "text": text})
            count += 1
    except BaseException:
        file.discard()
        raise
    file.commit()
    return count


def write_corpus(prefix: str, documents: Iterable[list[int]], dtype: np.dtype) -> tuple[int, int]:
    """A Megatron indexed dataset <prefix>.bin/.idx, one sequence per document; returns (documents, tokens)."""
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    lengths = []
    with open(f"{prefix}.bin.tmp", "wb") as handle:
        for ids in documents:
            handle.write(np.asarray(ids, dtype=dtype).tobytes())
            lengths.append(len(ids))
    write_index(f"{prefix}.idx.tmp", dtype, np.asarray(lengths, dtype=np.int32))
    # The .bin first: a reader opens the .idx, and finds its .bin complete whenever the .idx exists.
    os.replace(f"{prefix}.bin.tmp", f"{prefix}.bin")
    os.replace(f"{prefix}.idx.tmp", f"{prefix}.idx")
    return len(lengths), int(sum(lengths))


def write_metadata(directory: str, metadata: dict) -> str:
    path = os.path.join(directory, pd.METADATA_FILE)
    with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
        json.dump(metadata, handle, indent=1)
        handle.write("\n")
    os.replace(f"{path}.tmp", path)
    return path
