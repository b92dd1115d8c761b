"""Tokenizers read from files: GPT-2 BPE (vocab.json + merges.txt), BERT WordPiece (vocab.txt), SentencePiece
(.model), Hugging Face tokenizer.json.

    spec = TokenizerSpec(library="megatron", type="GPT2BPETokenizer", vocab_file="bpe/vocab.json",
                         merge_file="bpe/merges.txt")
    spec = TokenizerSpec(library="megatron", type="BertWordPieceLowerCase", vocab_file="bpe/vocab.txt")
    tok = load_tokenizer(spec)
    tokens, lengths, errors = tok.encode_batch(["first document", "second"])  # fast path, no EOD
    tok.encode("first document")                                            # reference path, one document
    tok.eod, tok.dtype, tok.decode(ids)

`encode` is the per-document behaviour the output is defined by; `encode_batch` must return exactly the same
ids (the tests hold it to that) and is what preprocessing uses. The spec is a small frozen dataclass so worker
processes can rebuild the tokenizer from it instead of receiving a pickled tokenizer.
"""
import abc
import json
import os
from dataclasses import dataclass
from itertools import chain
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..common.errors import DataPrepError
from ..common.tokenizer import (GPT2_EOD, LIBRARIES, MEGATRON_TYPES, WORDPIECE_TYPES, gpt2_bpe_pipeline,
                               wordpiece_pipeline)
from .indexed_format import token_dtype
from .segment_cache import SegmentCachedEncoder, supports
from .word_cache import WordCachedEncoder

# The libraries, Megatron's types and the GPT-2 end-of-text token are common/tokenizer.py's (imported above, and
# from here by the data steps): training and data preparation read the same tokenizer keys.
# WordPiece vocabularies have no end-of-text token; BERT separates segments with [SEP].
_WORDPIECE_EOD = "[SEP]"


class TokenizerError(DataPrepError):
    """A tokenizer that cannot be built from the configured files."""


@dataclass(frozen=True)
class TokenizerSpec:
    library: str  # megatron (GPT-2 BPE or BERT WordPiece), sentencepiece (model), huggingface (model = tokenizer.json)
    type: Optional[str] = None  # library megatron: GPT2BPETokenizer (null too), BertWordPieceCase, BertWordPieceLowerCase
    vocab_file: Optional[str] = None  # GPT-2 vocab.json (token -> id), or a WordPiece vocab.txt (one token a line)
    merge_file: Optional[str] = None  # GPT-2 merges.txt
    model: Optional[str] = None  # SentencePiece .model or Hugging Face tokenizer.json
    eod_token: Optional[str] = None  # appended after each document; null: <|endoftext|>, [SEP] (WordPiece), the model's EOS


class Tokenizer(abc.ABC):
    """A loaded tokenizer: per-document `encode`, batched `encode_batch`, `decode`, `eod`, `vocab_size`, `dtype`."""

    vocab_size: int
    eod: int

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    @abc.abstractmethod
    def encode(self, text: str) -> List[int]:
        """Token ids of one document, without EOD: the behaviour every other path must reproduce."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (used by tests and for inspecting datasets)."""

    def encode_batch(self, texts: Sequence[str]) -> Tuple[np.ndarray, np.ndarray, Dict[int, str]]:
        """(tokens back to back, tokens per document, {index: error}); default: one library batch call."""
        try:
            lists = self._encode_many(texts)
            errors: Dict[int, str] = {}
        except Exception:
            # One bad document fails the whole library call; find it (and any others) one at a time.
            lists, errors = [], {}
            for index, text in enumerate(texts):
                try:
                    lists.append(self.encode(text))
                except Exception as error:
                    lists.append([])
                    errors[index] = f"cannot tokenize: {error}"
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        tokens = np.fromiter(chain.from_iterable(lists), dtype=self.dtype, count=int(lengths.sum()))
        return tokens, lengths, errors

    def _encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        return [self.encode(text) for text in texts]


class _HuggingFaceTokenizer(Tokenizer):
    def __init__(self, hf, eod_token: str, segment_cache: bool, word_cache: bool = False):
        self._hf = hf
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)
        eod = hf.token_to_id(eod_token)
        if eod is None:
            raise TokenizerError(f"the tokenizer has no token {eod_token!r} to end documents with; set eod_token")
        self.eod = eod
        self._cached = None
        if segment_cache:
            self._cached = SegmentCachedEncoder(self.encode, self.dtype)
        elif word_cache:
            self._cached = WordCachedEncoder(self.encode, self.dtype, self._encode_many)

    def encode(self, text: str) -> List[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._hf.decode(list(ids), skip_special_tokens=False)

    def _encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        # encode_batch_fast skips offset tracking, which preprocessing never reads.
        return [e.ids for e in self._hf.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_batch(self, texts):
        if self._cached is not None:
            return self._cached.encode_batch(texts)
        return super().encode_batch(texts)


class _SentencePieceTokenizer(Tokenizer):
    def __init__(self, model: str, eod_token: Optional[str]):
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor(model_file=model)
        self.vocab_size = self._sp.get_piece_size()
        if eod_token is None:
            eod = self._sp.eos_id()
            if eod < 0:
                raise TokenizerError(f"{model}: the model has no EOS piece; set eod_token to a piece it has")
        else:
            eod = self._sp.piece_to_id(eod_token)
            if eod == self._sp.unk_id() and eod_token != self._sp.id_to_piece(eod):
                raise TokenizerError(f"{model}: no piece {eod_token!r} to end documents with")
        self.eod = eod

    def encode(self, text: str) -> List[int]:
        return self._sp.encode(text, out_type=int)

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode(list(map(int, ids)))

    def _encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        return self._sp.encode(list(texts), out_type=int)


def gpt2_bpe(vocab_file: str, merge_file: str):
    """The GPT-2 byte-level BPE (common/tokenizer.py's gpt2_bpe_pipeline), its two files checked first."""
    for key, path in (("vocab_file", vocab_file), ("merge_file", merge_file)):
        if not path or not os.path.isfile(path):
            raise TokenizerError(f"{key}={path!r}: file not found (the GPT-2 BPE needs vocab.json and merges.txt)")
    return gpt2_bpe_pipeline(vocab_file, merge_file)


def bert_wordpiece(vocab_file: str, lower_case: bool):
    """BERT's WordPiece (Megatron's BertWordPieceCase / BertWordPieceLowerCase) from vocab.txt: the pipeline
    training's tokenizer encodes with (jobs/common/tokenizer.py: wordpiece_pipeline), so the ids agree."""
    if not vocab_file or not os.path.isfile(vocab_file):
        raise TokenizerError(f"vocab_file={vocab_file!r}: file not found (a WordPiece tokenizer needs vocab.txt)")
    hf = wordpiece_pipeline(vocab_file, lower_case)
    if hf.token_to_id("[UNK]") is None:
        raise TokenizerError(f"{vocab_file}: the vocabulary has no [UNK] token; is it a WordPiece vocab.txt?")
    return hf


def load_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    # Worker processes each encode on one core; the Rust thread pool would only oversubscribe it.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if spec.library == "megatron":
        if spec.type in WORDPIECE_TYPES:
            return _HuggingFaceTokenizer(bert_wordpiece(spec.vocab_file, WORDPIECE_TYPES[spec.type]),
                                         spec.eod_token or _WORDPIECE_EOD, segment_cache=False, word_cache=True)
        if spec.type not in (None, "GPT2BPETokenizer"):
            raise TokenizerError(
                f"tokenizer_type={spec.type!r}: the megatron library builds {', '.join(MEGATRON_TYPES)}; "
                f"use tokenizer_library=sentencepiece or huggingface for other tokenizers"
            )
        return _HuggingFaceTokenizer(gpt2_bpe(spec.vocab_file, spec.merge_file), spec.eod_token or GPT2_EOD,
                                     segment_cache=True)
    if spec.library == "sentencepiece":
        if not spec.model or not os.path.isfile(spec.model):
            raise TokenizerError(f"tokenizer_model={spec.model!r}: SentencePiece model file not found")
        return _SentencePieceTokenizer(spec.model, spec.eod_token)
    if spec.library == "huggingface":
        from tokenizers import Tokenizer as HFTokenizer

        if not spec.model or not os.path.isfile(spec.model):
            raise TokenizerError(f"tokenizer_model={spec.model!r}: tokenizer.json not found")
        with open(spec.model, encoding="utf-8") as handle:
            description = json.load(handle)
        return _HuggingFaceTokenizer(HFTokenizer.from_file(spec.model), spec.eod_token or GPT2_EOD,
                                     segment_cache=supports(description))
    raise TokenizerError(f"tokenizer_library={spec.library!r}: expected one of {', '.join(LIBRARIES)}")
