"""Batch encoding for GPT-2-style byte-level BPE that skips the slow pre-tokenizer for text it has seen.

Where the time goes: Hugging Face `tokenizers` encodes GPT-2 BPE at about 3 MB/s per core, and most of that is
the ByteLevel pre-tokenizer's regex (Oniguruma); the BPE merges themselves are cached per word. Splitting on
" " with str.split runs at about 90 MB/s, and a dict lookup per piece is cheap, so this encoder cuts each
document at single spaces, looks each piece up in a cache of token ids, and asks the real tokenizer only for
pieces it has not seen. Output is identical to `tokenizer.encode(text)`, because the cuts are made only where
the GPT-2 pre-tokenizer regex

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

provably splits too, whatever the surrounding text:

    Take a space at position p with a non-whitespace character on each side. The match covering p-1 is a
    letter, number, symbol run or contraction; none of these can contain a space, and none looks ahead, so it
    ends at p. The space cannot join a whitespace run (its neighbours are not whitespace), so the next match
    starts at p with " " + the following run. Matches left of p never look past p, and matches from p on
    never look behind it. So encode(left + " " + right) == encode(left) + encode(" " + right).

Pieces next to other whitespace (double spaces, indentation, a newline before a space) are not cut there: the
whole run between two safe cuts is one segment, cached by its exact text. A new segment is assembled from finer
parts cut by a second rule about whitespace runs (see _COARSE), each cached too, so indented code costs the
tokenizer little more than prose. "Whitespace" for the space rule is a superset of every regex flavour's \\s,
which can only remove cuts, never add a wrong one; the finer rule is used only on text whose whitespace all
flavours agree on.

BPE is applied per pre-token and the pre-tokenizer is the regex above, so the proof holds for any
tokenizer whose pipeline is: no normalizer, ByteLevel pre-tokenizer with the GPT-2 regex and no prefix
space, a BPE model, and no added tokens that could span or absorb a space. `supports()` checks that.
"""

import re
import unicodedata
from collections.abc import Sequence

import numpy as np

# Characters treated as whitespace when deciding cuts: Python's str.isspace, Unicode separators, and the
# zero-width characters some older regex engines count as \s. Over-counting only makes fewer cuts.
_WHITESPACE = frozenset(
    c for c in map(chr, range(0x3001)) if c.isspace() or unicodedata.category(c) in ("Zs", "Zl", "Zp")
) | frozenset("\u180e\u200b\u2060\ufeff")

# Whitespace for every regex flavour involved (Python's regex, Oniguruma, str.isspace): the Unicode White_Space
# characters minus those some flavour disagrees on. tests/jobs/data/test_data_preprocess.py checks each against the
# tokenizer's own pre-tokenizer.
_CERTAIN_WHITESPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_AMBIGUOUS = re.compile(
    "[" + "".join(sorted(_WHITESPACE - set(re.findall(f"[{_CERTAIN_WHITESPACE}]", "".join(sorted(_WHITESPACE)))))) + "]"
)
# Inside a segment, finer cuts are safe too. Around a whitespace run W between non-whitespace characters the GPT-2
# regex always splits before W, before W's last character when W has two or more (\s+(?!\S) stops there),
# and after W when its last character is not a plain space (that space would join the next word). So the
# segment splits into: a non-whitespace run with at most one space in front, the whitespace run minus its
# last character, or one whitespace character. Exact only where every whitespace character is certain.
_COARSE = re.compile(
    f" ?[^{_CERTAIN_WHITESPACE}]+"  # a non-whitespace run, with the space in front of it if there is one
    f"|[{_CERTAIN_WHITESPACE}]+(?![^{_CERTAIN_WHITESPACE}])"  # a whitespace run, less the character before a word
    f"|[{_CERTAIN_WHITESPACE}]"  # that character, when it is not a space
)

# A cache past this many entries is dropped and rebuilt from the text that follows; with typical text
# the hit rate stays high while a 40 GB shard full of unique strings (URLs, hashes) cannot exhaust memory.
_MAX_CACHED = 2_000_000


def supports(tokenizer_json: dict) -> bool:
    """Whether a Hugging Face tokenizer.json describes a pipeline for which segment caching is exact."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    model = tokenizer_json.get("model") or {}
    if tokenizer_json.get("normalizer") is not None or model.get("type") != "BPE":
        return False
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return False
    for token in tokenizer_json.get("added_tokens") or []:
        content = token.get("content", "")
        if token.get("lstrip") or token.get("rstrip") or any(c in _WHITESPACE for c in content):
            return False
    return True


class SegmentCachedEncoder:
    """Encodes batches of documents with `encode_text` (the exact per-document encoder) plus a segment cache."""

    def __init__(self, encode_text, dtype: np.dtype):
        self._encode_text = encode_text  # str -> list of token ids, the reference behaviour
        self._dtype = np.dtype(dtype)
        self._reset()

    def _reset(self) -> None:
        # unit id -> tokens, in one growing buffer: unit u's tokens are _tokens[_starts[u]:_starts[u]+_lengths[u]]
        self._tokens = np.empty(1 << 16, dtype=self._dtype)
        self._starts = np.empty(1 << 12, dtype=np.int64)
        self._lengths = np.empty(1 << 12, dtype=np.int64)
        self._units = 0
        self._used = 0
        self._spaced: dict[str, int] = {}  # piece -> unit of " " + piece (a piece that is not first in its text)
        self._leading: dict[str, int] = {}  # piece -> unit of the piece itself (first in its text)
        self._segments: dict[str, int] = {}  # exact text of a multi-piece segment -> unit
        self._parts: dict[str, int] = {}  # exact text of a finer part of a segment (_COARSE) -> unit

    def _add_unit(self, ids: list[int]) -> int:
        if self._units == self._starts.size:
            self._starts = np.resize(self._starts, self._starts.size * 2)
            self._lengths = np.resize(self._lengths, self._lengths.size * 2)
        need = self._used + len(ids)
        if need > self._tokens.size:
            self._tokens = np.resize(self._tokens, max(need, self._tokens.size * 2))
        self._tokens[self._used : need] = ids
        unit = self._units
        self._starts[unit] = self._used
        self._lengths[unit] = len(ids)
        self._used = need
        self._units += 1
        return unit

    def _unit(self, cache: dict[str, int], key: str, text: str) -> int:
        unit = cache.get(key)
        if unit is None:
            unit = self._add_unit(self._encode_text(text))
            cache[key] = unit
        return unit

    def _document_units(self, text: str, out: list[int]) -> None:
        """Append the unit ids whose tokens, in order, are encode(text)."""
        pieces = text.split(" ")
        count = len(pieces)
        # Look every piece up at C speed. Only clean pieces are ever cached under _spaced/_leading, so a hit
        # is a clean piece; the misses (None) are unclean pieces or clean ones not seen yet.
        ids = list(map(self._spaced.get, pieces))
        ids[0] = self._leading.get(pieces[0])
        done = 0  # pieces[:done] are emitted
        whitespace = _WHITESPACE
        while True:
            try:
                k = ids.index(None, done)
            except ValueError:
                out.extend(ids[done:])
                return
            # The segment holding piece k runs between the nearest safe cuts on either side. Every cut at or
            # before `done` is safe (the previous segment ended on one), and hits left of k are clean, so the
            # left walk only crosses cuts next to unclean pieces.
            # (The cut test is inlined: these loops run once per piece of every indentation run.)
            start = k
            while start > done:
                left, right = pieces[start - 1], pieces[start]
                if left and right and left[-1] not in whitespace and right[0] not in whitespace:
                    break
                start -= 1
            end = k + 1
            while end < count:
                left, right = pieces[end - 1], pieces[end]
                if left and right and left[-1] not in whitespace and right[0] not in whitespace:
                    break
                end += 1
            out.extend(ids[done:start])
            out.append(self._segment_unit(pieces, start, end))
            done = end

    def _segment_unit(self, pieces: list[str], start: int, end: int) -> int:
        if end - start == 1 and _clean_start(pieces[start]) and _clean_end(pieces[start]):
            piece = pieces[start]
            if start == 0:
                return self._unit(self._leading, piece, piece)
            return self._unit(self._spaced, piece, " " + piece)
        # Unclean pieces, and clean ones bound to an unclean neighbour, are cached by their exact text; such
        # entries never serve a piece lookup, so they cannot vouch for a cut.
        segment = " ".join(pieces[start:end])
        if start > 0:
            segment = " " + segment
        unit = self._segments.get(segment)
        if unit is None:
            unit = self._add_unit(self._encode_segment(segment))
            self._segments[segment] = unit
        return unit

    def _encode_segment(self, segment: str):
        """Tokens of a multi-piece segment. Segments (indented code, paragraph breaks) repeat less than words,
        so a new one is built from cached finer parts; the tokenizer sees only parts never seen before."""
        if _AMBIGUOUS.search(segment):
            return self._encode_text(segment)
        parts = []
        for part in _COARSE.findall(segment):
            unit = self._unit(self._parts, part, part)
            start = self._starts[unit]
            parts.append(self._tokens[start : start + self._lengths[unit]])
        return np.concatenate(parts) if parts else []

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(tokens of all documents back to back, tokens per document, {document index: error}).

        A document the tokenizer rejects (for example a lone UTF-16 surrogate from a JSON escape) gets length
        0 and an entry in the error map; the rest of the batch is unaffected.
        """
        if self._units > _MAX_CACHED:
            self._reset()
        units: list[int] = []
        counts = np.zeros(len(texts), dtype=np.int64)
        errors: dict[int, str] = {}
        for index, text in enumerate(texts):
            before = len(units)
            try:
                self._document_units(text, units)
            except Exception as error:  # the tokenizer's own exception types differ by library and version
                del units[before:]
                errors[index] = f"cannot tokenize: {error}"
            counts[index] = len(units) - before
        return self._gather(units, counts, errors)

    def _gather(self, units: list[int], counts: np.ndarray, errors: dict[int, str]):
        """(tokens, tokens per document, errors) from the units of all documents back to back, `counts` per document."""
        unit_ids = np.fromiter(units, dtype=np.int64, count=len(units))
        lengths = self._lengths[unit_ids]
        total = int(lengths.sum())
        # Gather: the i-th output token of unit u is _tokens[_starts[u] + i]. Build the source index of every
        # output token with one repeat + arange instead of a Python loop over units.
        unit_offsets = np.cumsum(lengths) - lengths
        source = np.repeat(self._starts[unit_ids] - unit_offsets, lengths) + np.arange(total, dtype=np.int64)
        tokens = self._tokens[source]
        # Tokens per document: differences of the running token count at each document's last unit.
        running = np.concatenate(([0], np.cumsum(lengths)))
        unit_end = np.cumsum(counts)
        document_lengths = running[unit_end] - running[unit_end - counts]
        return tokens, document_lengths, errors


def _clean_start(piece: str) -> bool:
    return bool(piece) and piece[0] not in _WHITESPACE


def _clean_end(piece: str) -> bool:
    return bool(piece) and piece[-1] not in _WHITESPACE
