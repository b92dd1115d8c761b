"""Batch encoding for BERT WordPiece that looks each word up in a cache instead of running the tokenizer on it.

The BERT pipeline (normalizer, whitespace-and-punctuation pre-tokenizer, WordPiece per word) never lets a token
cross a plain space, so the tokens of a text are the tokens of its pieces between single spaces, in order:

    The space is whitespace to the pre-tokenizer, which drops it and starts a new word after it. The normalizer
    works character by character (control characters dropped, whitespace made a space, CJK ideographs padded,
    lower-casing), except for accent stripping, which decomposes (NFD) and drops combining marks; canonical
    decomposition and reordering never move a mark across a space (a starter), so it too gives the same
    result on the pieces as on the whole. WordPiece sees one word at a time, with its 200-character limit per word.
    So encode(left + " " + right) == encode(left) + encode(right).

Text splits at spaces at C speed, and real text repeats its words, so after a warm-up almost every piece is a
dict hit; the tokenizer sees only words it has not met yet. The unit store and the vectorized gather are the
segment cache's (segment_cache.py); only the cutting rule differs. Exactness holds only for the pipeline
tokenizer.bert_wordpiece builds (no added tokens that could contain a space); the tests compare it with encode.
"""

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from .segment_cache import _MAX_CACHED, SegmentCachedEncoder


class WordCachedEncoder(SegmentCachedEncoder):
    """`encode_batch` for WordPiece: each space-separated piece is one cached unit (`_leading`: piece -> unit).

    The words of a batch that are not cached yet are encoded together, in one call of `encode_many` (the
    tokenizer's batch call: one call per new word would cost more than the encoding itself).
    """

    def __init__(self, encode_text: Callable, dtype, encode_many: Callable | None = None):
        super().__init__(encode_text, dtype)
        self._encode_many = encode_many or (lambda texts: [encode_text(text) for text in texts])

    def encode_batch(self, texts: Sequence[str]):
        if self._units > _MAX_CACHED:
            self._reset()
        cache = self._leading
        split = [text.split(" ") for text in texts]
        new = [piece for piece in dict.fromkeys(chain.from_iterable(split)) if piece not in cache]
        failed: dict[str, str] = {}
        if new:
            try:
                encoded = self._encode_many(new)
            except Exception:  # one bad word fails the whole call; find it (and any others) one at a time
                encoded = []
                for piece in new:
                    try:
                        encoded.append(self._encode_text(piece))
                    except Exception as error:  # the tokenizer's own exception types differ by version
                        encoded.append(None)
                        failed[piece] = str(error)
            self._add_units([(piece, ids) for piece, ids in zip(new, encoded) if ids is not None])
        units: list[int] = []
        counts = np.zeros(len(texts), dtype=np.int64)
        errors: dict[int, str] = {}
        for index, pieces in enumerate(split):
            found = list(map(cache.get, pieces))
            if failed and None in found:
                bad = next(piece for piece, unit in zip(pieces, found) if unit is None)
                errors[index] = f"cannot tokenize: {failed[bad]}"
                continue
            units.extend(found)
            counts[index] = len(found)
        return self._gather(units, counts, errors)

    def _add_units(self, entries) -> None:
        """Store many (piece, token ids) at once: one copy into the token buffer instead of one per word."""
        if not entries:
            return
        lengths = np.fromiter((len(ids) for _, ids in entries), dtype=np.int64, count=len(entries))
        flat = np.fromiter(chain.from_iterable(ids for _, ids in entries), dtype=self._dtype, count=int(lengths.sum()))
        first, count = self._units, len(entries)
        if first + count > self._starts.size:
            size = max(first + count, 2 * self._starts.size)
            self._starts, self._lengths = np.resize(self._starts, size), np.resize(self._lengths, size)
        if self._used + flat.size > self._tokens.size:
            self._tokens = np.resize(self._tokens, max(self._used + flat.size, 2 * self._tokens.size))
        self._tokens[self._used : self._used + flat.size] = flat
        self._starts[first : first + count] = self._used + np.cumsum(lengths) - lengths
        self._lengths[first : first + count] = lengths
        self._used += int(flat.size)
        self._units += count
        for offset, (piece, _) in enumerate(entries):
            self._leading[piece] = first + offset
