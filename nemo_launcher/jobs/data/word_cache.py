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
from typing import List

from .segment_cache import SegmentCachedEncoder


class WordCachedEncoder(SegmentCachedEncoder):
    """`encode_batch` for WordPiece: each space-separated piece is one cached unit (`_leading`: piece -> unit)."""

    def _document_units(self, text: str, out: List[int]) -> None:
        pieces = text.split(" ")
        units = list(map(self._leading.get, pieces))
        if None in units:
            cache, encode = self._leading, self._encode_text
            for index, unit in enumerate(units):
                if unit is None:
                    piece = pieces[index]
                    unit = cache.get(piece)  # the same new word may occur twice in one text
                    if unit is None:
                        unit = self._add_unit(encode(piece))
                        cache[piece] = unit
                    units[index] = unit
        out.extend(units)
