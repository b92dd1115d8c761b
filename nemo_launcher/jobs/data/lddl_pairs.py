"""Sentence-order pairs cut from documents, as BERT's data takes them, and the LDDL split and bin of each.

    pairs = document_pairs(sentences, binning, rng)      # [Pair(a, b, swapped), ...] from one document
    counts = split_counts("949,45,5", documents)         # documents of train, validation, test

A document is a list of sentences, each an array of WordPiece ids. As in megatron-core's BERT dataset and LDDL's
preprocessor, sentences are gathered until they reach a target length (the longest a sample may be, or with
probability short_seq_prob a random shorter one), then cut at a random sentence boundary into segments A and B;
half of the pairs are swapped, which is what the sentence-order head learns to tell. A run of one sentence gives
no pair (megatron-core's BERT dataset refuses such samples too). Pairs longer than the target lose tokens from the
longer segment, at its front or back at random, as megatron-core trims them. Masking is left to the loader, which
draws it afresh for every sample it serves (LDDL's dynamic masking).

numpy only: no torch, no pyarrow.
"""

import dataclasses

import numpy as np

SPECIAL_TOKENS = 3  # [CLS] A [SEP] B [SEP]


@dataclasses.dataclass(frozen=True)
class Pair:
    a: np.ndarray  # ids of segment A
    b: np.ndarray  # ids of segment B
    swapped: bool  # A and B trade places (LDDL's is_random_next, megatron-core's is_random)

    @property
    def num_tokens(self) -> int:
        return len(self.a) + len(self.b) + SPECIAL_TOKENS


def split_counts(splits_string: str, documents: int) -> list[int]:
    """Documents of train, validation and test: each split's share of the weights, rounded at the cumulative
    bounds so the counts add up to `documents`."""
    weights = [float(w) for w in splits_string.replace("/", ",").split(",")]
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    bounds = np.round(np.cumsum([0.0, *weights]) / total * documents).astype(int)
    return [int(hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _trim(a: list[int], b: list[int], limit: int, rng: np.random.Generator) -> None:
    """Drop tokens from the longer segment, at its front or back at random, until both fit in `limit`."""
    while len(a) + len(b) > limit:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def document_pairs(
    sentences: list[np.ndarray], target_seq_length: int, short_seq_prob: float, rng: np.random.Generator
) -> list[Pair]:
    """The pairs of one document for samples of at most target_seq_length tokens, special tokens included."""
    limit = target_seq_length - SPECIAL_TOKENS
    target = limit
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, limit + 1)) if limit >= 2 else limit
    pairs: list[Pair] = []
    chunk: list[np.ndarray] = []
    length = 0
    for index, sentence in enumerate(sentences):
        chunk.append(sentence)
        length += len(sentence)
        if index < len(sentences) - 1 and length < target:
            continue
        if len(chunk) >= 2:
            cut = int(rng.integers(1, len(chunk)))
            a = [int(t) for s in chunk[:cut] for t in s]
            b = [int(t) for s in chunk[cut:] for t in s]
            _trim(a, b, limit, rng)
            if a and b:
                swapped = bool(rng.random() < 0.5)
                first, second = (b, a) if swapped else (a, b)
                pairs.append(Pair(np.asarray(first, np.int64), np.asarray(second, np.int64), swapped))
        chunk, length = [], 0
    return pairs
