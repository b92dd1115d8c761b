"""Source/target text files -> T5 samples, for fine-tuning and evaluation.

    pairs = read_pairs("train_src.txt", "train_tgt.txt")                 # [{"source", "target", "answers"}, ...]
    encoder = PairEncoder(tokenizer, max_source=512, max_target=128)
    sample = encoder.encode(pairs[0])    # text_enc, enc_mask, text_dec, dec_mask, labels, loss_mask: fixed lengths

Line i of a target file answers line i of its source file; an answers file (what squad_data writes) holds a JSON
list of every accepted answer on line i. A sample is laid out as T5's pre-training samples are, so the T5 recipe's
forward step and loss serve fine-tuning unchanged:
    encoder   source ids (cut to max_source - 1) + eos, then pad
    decoder   bos + target ids (cut to max_target - 1), then pad
    labels    target ids + eos, then pad; loss_mask 1 on the target ids and eos
Every sample is padded to the section's maximum lengths, so every step has the shapes (and the tokens/s) of
pre-training; the masks hide the padding.
"""

import json
from pathlib import Path

import numpy as np

from ..common.config import JobConfigError

Pair = dict[str, object]  # {"source": str, "target": str, "answers": [str, ...]}


def _lines(path: str, key: str) -> list[str]:
    if not Path(path).is_file():
        raise JobConfigError(f"{key}: {path} does not exist")
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def read_pairs(
    source_file: str, target_file: str, answers_file: str | None = None, key: str = "model.data"
) -> list[Pair]:
    sources = _lines(source_file, f"{key}.src_file_name")
    targets = _lines(target_file, f"{key}.tgt_file_name")
    if len(sources) != len(targets):
        raise JobConfigError(
            f"{key}.tgt_file_name: {target_file} has {len(targets)} lines, its source file {source_file} "
            f"{len(sources)}; line i of the target file answers line i of the source file"
        )
    if not sources:
        raise JobConfigError(f"{key}.src_file_name: {source_file} is empty")
    answers: list[list[str]] = [[target] for target in targets]
    if answers_file is not None:
        lines = _lines(answers_file, f"{key}.answers_file_name")
        if len(lines) != len(sources):
            raise JobConfigError(
                f"{key}.answers_file_name: {answers_file} has {len(lines)} lines for {len(sources)} sources"
            )
        for number, line in enumerate(lines):
            try:
                accepted = json.loads(line)
            except json.JSONDecodeError:
                accepted = None
            if not isinstance(accepted, list) or not accepted or not all(isinstance(a, str) for a in accepted):
                raise JobConfigError(
                    f"{key}.answers_file_name: {answers_file}:{number + 1} is not a JSON list of answer texts"
                )
            answers[number] = accepted
    return [{"source": s, "target": t, "answers": a} for s, t, a in zip(sources, targets, answers)]


class PairEncoder:
    def __init__(self, tokenizer, max_source: int, max_target: int):
        self.tokenizer = tokenizer
        self.max_source, self.max_target = max_source, max_target

    def source_ids(self, text: str) -> list[int]:
        """The encoder's tokens for a source, as in training: what generation feeds the encoder too."""
        return self.tokenizer.encode(text)[: self.max_source - 1] + [self.tokenizer.eos]

    def encode(self, pair: Pair) -> dict[str, np.ndarray]:
        tok = self.tokenizer
        source = self.source_ids(pair["source"])
        target = tok.encode(pair["target"])[: self.max_target - 1]
        decoder, labels = [tok.bos] + target, target + [tok.eos]
        sample = {
            "text_enc": np.full(self.max_source, tok.pad, dtype=np.int64),
            "enc_mask": np.zeros(self.max_source, dtype=np.int64),
            "text_dec": np.full(self.max_target, tok.pad, dtype=np.int64),
            "dec_mask": np.zeros(self.max_target, dtype=np.int64),
            "labels": np.full(self.max_target, tok.pad, dtype=np.int64),
            "loss_mask": np.zeros(self.max_target, dtype=np.float32),
        }
        sample["text_enc"][: len(source)], sample["enc_mask"][: len(source)] = source, 1
        sample["text_dec"][: len(decoder)], sample["dec_mask"][: len(decoder)] = decoder, 1
        sample["labels"][: len(labels)], sample["loss_mask"][: len(labels)] = labels, 1.0
        return sample


class EncodedPairs:
    """A map-style dataset over any indexable of pairs (a list, gpt.sft_data.MixedDataset), tokenizing lazily so
    DataLoader workers share the work and start-up does not wait for whole files."""

    def __init__(self, pairs, encoder: PairEncoder):
        self.pairs, self.encoder = pairs, encoder

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.encoder.encode(self.pairs[index])
