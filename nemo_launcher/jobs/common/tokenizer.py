"""Tokenizers loaded from files only (compute nodes have no network), for the `model.tokenizer` keys.

    tok = load_tokenizer(library="megatron", type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    tok.encode("Hello world") -> [15496, 995];  tok.eod -> 50256;  tok.vocab_size -> 50257
    t5 = load_tokenizer("megatron", "BertWordPieceCase", vocab_file="vocab.txt", num_sentinel_tokens=100)
    t5.cls, t5.sep, t5.mask, t5.pad, t5.bos, t5.eos, t5.additional_special_tokens_ids[:2], t5.inv_vocab[101]

| library       | type / files                                          | end-of-document token              |
|---------------|-------------------------------------------------------|------------------------------------|
| megatron      | GPT2BPETokenizer: GPT-2 vocab.json + merges.txt       | <|endoftext|>                      |
| megatron      | BertWordPieceCase / BertWordPieceLowerCase: vocab.txt | [SEP]                              |
| sentencepiece | model: a SentencePiece .model                         | the model's eos piece              |
| huggingface   | model: a Hugging Face tokenizer.json                  | the first of _HF_EOD_CANDIDATES it holds |

The object also satisfies what megatron-core's GPTDataset asks of a tokenizer (`eod`, `pad`,
`unique_identifiers`), so datasets can be built without megatron's tokenizer classes, which
need `transformers` for Hugging Face files. WordPiece tokenizers, and SentencePiece ones loaded with
num_sentinel_tokens > 0 (mT5), are MaskingTokenizers: they also have what megatron-core's BERT and T5 datasets
read (cls, sep, mask, pad, bos, eos, inv_vocab, additional_special_tokens_ids: T5's sentinels, <extra_id_0> first).

Special tokens a file lacks are appended after its vocabulary, as Megatron-LM's tokenizers do: WordPiece gets
[BOS] and [EOS] (if vocab.txt has none), then <extra_id_0> ... <extra_id_N-1>; a SentencePiece model without
<extra_id_N> pieces gets N sentinels with <extra_id_0> the highest id (T5's and mT5's own numbering), then
<cls> <sep> <mask> <bos> <pad> as needed (sentencepiece_legacy, NeMo's name for adding them outside the model).

Data preparation reads the same files through a TokenizerSpec and gets a BatchTokenizer, which adds what
preprocessing needs: `encode_batch` (tokens back to back, lengths, per-document errors; the caches of
segment_cache.py and word_cache.py make it fast) and the `dtype` of the .bin file. Its errors are TokenizerErrors
(DataPrepError: one line, exit 2, as every data step's).

    spec = TokenizerSpec(library="megatron", type="GPT2BPETokenizer", vocab_file="bpe/vocab.json",
                         merge_file="bpe/merges.txt")
    tok = load_batch_tokenizer(spec)
    tokens, lengths, errors = tok.encode_batch(["first document", "second"])  # fast path, no EOD
    tok.encode("first document")                                            # reference path, one document

`encode` is the per-document behaviour the output is defined by; `encode_batch` must return exactly the same
ids (the tests hold it to that). The spec is a small frozen dataclass so worker processes can rebuild the
tokenizer from it instead of receiving a pickled tokenizer. Both paths build the GPT-2 BPE and BERT's WordPiece
with the same pipelines (gpt2_bpe_pipeline, wordpiece_pipeline), so training and the prepared data agree.
"""

import abc
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from ...contract.tokenizers import MEGATRON_TYPES, WORDPIECE_TYPES
from ...contract.tokenizers import TOKENIZER_LIBRARIES as LIBRARIES
from .config import JobConfigError
from .errors import DataPrepError
from .segment_cache import SegmentCachedEncoder, supports
from .word_cache import WordCachedEncoder

GPT2_EOD = "<|endoftext|>"
# The specials a WordPiece vocab.txt must hold; BERT's datasets need each of them.
_WORDPIECE_REQUIRED = {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"}
# WordPiece vocabularies have no end-of-text token; BERT separates segments with [SEP].
_WORDPIECE_EOD = "[SEP]"
_HF_EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]")


class Tokenizer:
    """Text <-> token ids. `eod` ends every document in the indexed datasets."""

    def __init__(self, encode, decode, vocab_size: int, eod: int, description: dict):
        self._encode = encode
        self._decode = decode
        self.vocab_size = vocab_size
        self.eod = eod
        # GPTDataset pads the last partial sample with this id; the loss mask hides those positions.
        self.pad = eod
        # megatron-core json-dumps this into its index-cache key, so it must name the files exactly.
        self.unique_identifiers = description

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def decode(self, ids: list[int]) -> str:
        return self._decode(ids)


class MaskingTokenizer(Tokenizer):
    """A tokenizer for masked-language-model data (megatron-core's BERT and T5 datasets): special token ids,
    `inv_vocab` (id -> token, every id) and `additional_special_tokens_ids` (T5's sentinels, in order)."""

    def __init__(
        self,
        encode,
        decode,
        inv_vocab: dict[int, str],
        specials: dict[str, int],
        sentinels: list[int],
        eod: int,
        description: dict,
    ):
        super().__init__(encode, decode, len(inv_vocab), eod, description)
        self.inv_vocab = inv_vocab
        self.vocab = {token: index for index, token in inv_vocab.items()}
        self.cls, self.sep, self.mask = specials["cls"], specials["sep"], specials["mask"]
        self.pad, self.bos, self.eos = specials["pad"], specials["bos"], specials["eos"]
        self.additional_special_tokens_ids = list(sentinels)
        # megatron-core checks the pad id against these (MegatronDataset): pad must collide with none of them.
        self.special_tokens_dict = {
            "cls_token": self.cls,
            "sep_token": self.sep,
            "mask_token": self.mask,
            "pad_token": self.pad,
            "bos_token": self.bos,
            "eos_token": self.eos,
        }


def load_tokenizer(
    library: str,
    type: str | None = None,
    model: str | None = None,
    vocab_file: str | None = None,
    merge_file: str | None = None,
    key: str = "model.tokenizer",
    num_sentinel_tokens: int = 0,
    sentencepiece_legacy: bool = True,
    delimiter: str | None = None,
) -> Tokenizer:
    """`delimiter`: the reference's tabular-tokenizer key, which the GPT schema holds at null (no tokenizer here
    reads it). `num_sentinel_tokens`: T5's sentinels (100 for T5 and mT5; 0 for GPT and BERT).
    `sentencepiece_legacy`: special tokens a SentencePiece model lacks are added after it (else their absence is an
    error)."""
    if isinstance(num_sentinel_tokens, bool) or not isinstance(num_sentinel_tokens, int) or num_sentinel_tokens < 0:
        raise JobConfigError(f"{key}.num_sentinel_tokens: {num_sentinel_tokens!r} must be a non-negative integer")
    if library == "megatron":
        if type not in MEGATRON_TYPES:
            raise JobConfigError(
                f"{key}.type: {type!r} is not supported with library megatron; use one of {', '.join(MEGATRON_TYPES)}"
            )
        if type in WORDPIECE_TYPES:
            return _wordpiece(_existing(vocab_file, f"{key}.vocab_file"), type, num_sentinel_tokens, key)
        return _gpt2_bpe(_existing(vocab_file, f"{key}.vocab_file"), _existing(merge_file, f"{key}.merge_file"))
    if library == "sentencepiece":
        if num_sentinel_tokens:
            return _sentencepiece_t5(_existing(model, f"{key}.model"), num_sentinel_tokens, sentencepiece_legacy, key)
        return _sentencepiece(_existing(model, f"{key}.model"))
    if library == "huggingface":
        return _huggingface(_existing(model, f"{key}.model"), key)
    raise JobConfigError(f"{key}.library: {library!r} is not one of {', '.join(LIBRARIES)}")


def _existing(path: str | None, key: str) -> Path:
    if not path:
        raise JobConfigError(f"{key}: a file is required for this tokenizer library")
    if not Path(path).is_file():
        raise JobConfigError(f"{key}: {path} does not exist")
    return Path(path)


def gpt2_bpe_pipeline(vocab_file: str, merge_file: str):
    """The GPT-2 byte-level BPE as a Hugging Face tokenizer, built from the two files alone; training and data
    preparation (BatchTokenizer) both encode with it.

    No special tokens are registered, as in Megatron-LM's and OpenAI's GPT-2 encoders: a literal
    "<|endoftext|>" inside a document is encoded as text, and only the EOD that preprocessing appends is 50256.
    """
    from tokenizers import Tokenizer as HFTokenizer  # deferred: Rust library
    from tokenizers import decoders, models, pre_tokenizers

    hf = HFTokenizer(models.BPE.from_file(str(vocab_file), str(merge_file)))
    # GPT-2 maps bytes to printable characters before BPE; no space is prepended to the text.
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    return hf


def _gpt2_bpe(vocab_file: Path, merge_file: Path) -> Tokenizer:
    hf = gpt2_bpe_pipeline(vocab_file, merge_file)
    eod = hf.token_to_id(GPT2_EOD)
    if eod is None:
        raise JobConfigError(f"{vocab_file}: the vocabulary has no {GPT2_EOD} token, so documents cannot be separated")
    return Tokenizer(
        encode=lambda text: hf.encode(text).ids,
        decode=hf.decode,
        vocab_size=hf.get_vocab_size(with_added_tokens=True),
        eod=eod,
        description={"class": "GPT2BPETokenizer", "vocab_file": str(vocab_file), "merge_file": str(merge_file)},
    )


def wordpiece_pipeline(vocab_file: str, lower_case: bool):
    """BERT's WordPiece as Megatron-LM's BertWordPiece tokenizers encode (a Hugging Face tokenizer).

    Google's BERT pipeline: drop control characters, put spaces around CJK ideographs, lower-case and strip
    accents (LowerCase only), split at whitespace and punctuation, then greedy longest-match WordPiece with [UNK]
    for words it cannot cover or longer than 200 characters (the limit of Megatron-LM's and Google's tokenizers;
    Hugging Face's BertTokenizer uses 100). The special tokens are not registered as added tokens, so "[CLS]"
    written in a text is text. Data preparation (BatchTokenizer) encodes with this same pipeline.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    hf = HFTokenizer(models.WordPiece.from_file(str(vocab_file), unk_token="[UNK]", max_input_chars_per_word=200))
    hf.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower_case
    )
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf.decoder = decoders.WordPiece()
    return hf


def _wordpiece(vocab_file: Path, type: str, sentinels: int, key: str) -> MaskingTokenizer:
    from tokenizers import decoders

    with open(vocab_file, encoding="utf-8") as handle:
        tokens = [line.rstrip("\n") for line in handle]
    inv_vocab = dict(enumerate(tokens))
    ids = {token: index for index, token in reversed(list(enumerate(tokens)))}  # the first of duplicates wins
    missing = [token for token in _WORDPIECE_REQUIRED.values() if token not in ids]
    if missing:
        raise JobConfigError(
            f"{key}.vocab_file: {vocab_file} has no {', '.join(missing)}; BERT and T5 data need "
            f"[PAD] [UNK] [CLS] [SEP] [MASK] (is it a BERT WordPiece vocab.txt?)"
        )

    def token_id(token: str) -> int:
        if token not in ids:  # appended after the vocabulary, as Megatron-LM's BertWordPiece tokenizers do
            ids[token] = len(inv_vocab)
            inv_vocab[len(inv_vocab)] = token
        return ids[token]

    specials = {name: ids[token] for name, token in _WORDPIECE_REQUIRED.items()}
    specials.update(bos=token_id("[BOS]"), eos=token_id("[EOS]"))
    sentinel_ids = [token_id(f"<extra_id_{i}>") for i in range(sentinels)]
    hf = wordpiece_pipeline(str(vocab_file), WORDPIECE_TYPES[type])
    decoder = decoders.WordPiece()
    return MaskingTokenizer(
        encode=lambda text: hf.encode(text, add_special_tokens=False).ids,
        decode=lambda ids_: decoder.decode([inv_vocab[int(i)] for i in ids_]),
        inv_vocab=inv_vocab,
        specials=specials,
        sentinels=sentinel_ids,
        eod=specials["sep"],
        description={"class": type, "vocab_file": str(vocab_file), "num_sentinel_tokens": sentinels},
    )


def _sentencepiece_t5(model_file: Path, sentinels: int, legacy: bool, key: str) -> MaskingTokenizer:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    pieces = sp.get_piece_size()
    inv_vocab = {index: sp.id_to_piece(index) for index in range(pieces)}
    ids = {piece: index for index, piece in inv_vocab.items()}
    names = [f"<extra_id_{i}>" for i in range(sentinels)]
    present = [name for name in names if name in ids]
    if present and len(present) != sentinels:
        raise JobConfigError(
            f"{key}.model: {model_file} has {len(present)} of the {sentinels} pieces <extra_id_N> "
            f"(num_sentinel_tokens); it must have all or none"
        )
    missing = []

    def token_id(value: int, *candidates: str) -> int:
        if value >= 0:
            return value
        for candidate in candidates:
            if candidate in ids:
                return ids[candidate]
        missing.append(candidates[0])
        ids[candidates[0]] = len(inv_vocab)
        inv_vocab[len(inv_vocab)] = candidates[0]
        return ids[candidates[0]]

    if not present:
        # T5's numbering: <extra_id_0> is the highest of the N ids after the model's pieces.
        for i, name in enumerate(names):
            inv_vocab[pieces + sentinels - 1 - i] = name
            ids[name] = pieces + sentinels - 1 - i
        missing += names
    sentinel_ids = [ids[name] for name in names]
    if sp.eos_id() < 0:
        raise JobConfigError(f"{key}.model: {model_file} has no eos piece, which T5's decoder targets end with")
    specials = {
        "cls": token_id(-1, "<cls>", "[CLS]"),
        "sep": token_id(-1, "<sep>", "[SEP]"),
        "mask": token_id(-1, "<mask>", "[MASK]"),
        "bos": token_id(sp.bos_id(), "<bos>", "<s>"),
        "pad": token_id(sp.pad_id(), "<pad>"),
        "eos": sp.eos_id(),
    }
    if missing and not legacy:
        raise JobConfigError(
            f"{key}.model: {model_file} lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; "
            f"add them to the model, or set {key}.sentencepiece_legacy=true to add them after it"
        )
    return MaskingTokenizer(
        encode=lambda text: sp.encode(text),
        # Added ids are not pieces of the model: decoding shows the model's pieces only.
        decode=lambda ids_: sp.decode([int(i) for i in ids_ if int(i) < pieces]),
        inv_vocab=dict(sorted(inv_vocab.items())),
        specials=specials,
        sentinels=sentinel_ids,
        eod=sp.eos_id(),
        description={
            "class": "SentencePieceTokenizer",
            "model": str(model_file),
            "num_sentinel_tokens": sentinels,
            "legacy": legacy,
        },
    )


def _sentencepiece(model_file: Path) -> Tokenizer:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    eod = sp.eos_id()
    if eod < 0:
        raise JobConfigError(
            f"{model_file}: the SentencePiece model has no eos piece, so documents cannot be separated"
        )
    return Tokenizer(
        encode=lambda text: sp.encode(text),
        decode=sp.decode,
        vocab_size=sp.get_piece_size(),
        eod=eod,
        description={"class": "SentencePieceTokenizer", "model": str(model_file)},
    )


def _huggingface(tokenizer_json: Path, key: str) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    try:
        hf = HFTokenizer.from_file(str(tokenizer_json))
    except Exception as error:  # the Rust side raises a bare Exception with its parse message
        raise JobConfigError(f"{key}.model: {tokenizer_json} is not a Hugging Face tokenizer.json ({error})") from None
    eod = next((hf.token_to_id(t) for t in _HF_EOD_CANDIDATES if hf.token_to_id(t) is not None), None)
    if eod is None:
        raise JobConfigError(
            f"{key}.model: {tokenizer_json} has none of the end-of-document tokens {', '.join(_HF_EOD_CANDIDATES)}"
        )
    return Tokenizer(
        # Special tokens are added by the data pipeline (the eod), not by the tokenizer's post-processor.
        encode=lambda text: hf.encode(text, add_special_tokens=False).ids,
        decode=hf.decode,
        vocab_size=hf.get_vocab_size(with_added_tokens=True),
        eod=eod,
        description={"class": "HuggingFaceTokenizer", "model": str(tokenizer_json)},
    )


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 below 65500 ids, else int32: the rule megatron's DType.optimal_dtype applies, so files match."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


# ---- data preparation: batch encoders -------------------------------------------------------------------------


class TokenizerError(DataPrepError):
    """A tokenizer that cannot be built from the configured files."""


@dataclass(frozen=True)
class TokenizerSpec:
    library: str  # megatron (GPT-2 BPE or BERT WordPiece), sentencepiece (model), huggingface (model = tokenizer.json)
    type: str | None = None  # library megatron: GPT2BPETokenizer (null too), BertWordPieceCase, BertWordPieceLowerCase
    vocab_file: str | None = None  # GPT-2 vocab.json (token -> id), or a WordPiece vocab.txt (one token a line)
    merge_file: str | None = None  # GPT-2 merges.txt
    model: str | None = None  # SentencePiece .model or Hugging Face tokenizer.json
    eod_token: str | None = (
        None  # appended after each document; null: <|endoftext|>, [SEP] (WordPiece), the model's EOS
    )


class BatchTokenizer(abc.ABC):
    """A loaded tokenizer: per-document `encode`, batched `encode_batch`, `decode`, `eod`, `vocab_size`, `dtype`."""

    vocab_size: int
    eod: int

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of one document, without EOD: the behaviour every other path must reproduce."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (used by tests and for inspecting datasets)."""

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(tokens back to back, tokens per document, {index: error}); default: one library batch call."""
        try:
            lists = self._encode_many(texts)
            errors: dict[int, str] = {}
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

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]


class _HuggingFaceBatch(BatchTokenizer):
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

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._hf.decode(list(ids), skip_special_tokens=False)

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        # encode_batch_fast skips offset tracking, which preprocessing never reads.
        return [e.ids for e in self._hf.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_batch(self, texts):
        if self._cached is not None:
            return self._cached.encode_batch(texts)
        return super().encode_batch(texts)


class _SentencePieceBatch(BatchTokenizer):
    def __init__(self, model: str, eod_token: str | None):
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

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text, out_type=int)

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode(list(map(int, ids)))

    def _encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts), out_type=int)


def gpt2_bpe(vocab_file: str, merge_file: str):
    """The GPT-2 byte-level BPE (gpt2_bpe_pipeline), its two files checked first."""
    for key, path in (("vocab_file", vocab_file), ("merge_file", merge_file)):
        if not path or not os.path.isfile(path):
            raise TokenizerError(f"{key}={path!r}: file not found (the GPT-2 BPE needs vocab.json and merges.txt)")
    return gpt2_bpe_pipeline(vocab_file, merge_file)


def bert_wordpiece(vocab_file: str, lower_case: bool):
    """BERT's WordPiece (Megatron's BertWordPieceCase / BertWordPieceLowerCase) from vocab.txt: the pipeline
    training's tokenizer encodes with (wordpiece_pipeline), so the ids agree."""
    if not vocab_file or not os.path.isfile(vocab_file):
        raise TokenizerError(f"vocab_file={vocab_file!r}: file not found (a WordPiece tokenizer needs vocab.txt)")
    hf = wordpiece_pipeline(vocab_file, lower_case)
    if hf.token_to_id("[UNK]") is None:
        raise TokenizerError(f"{vocab_file}: the vocabulary has no [UNK] token; is it a WordPiece vocab.txt?")
    return hf


def load_batch_tokenizer(spec: TokenizerSpec) -> BatchTokenizer:
    """The batch encoder data preparation tokenizes with (TokenizerError when its files do not make one)."""
    # Worker processes each encode on one core; the Rust thread pool would only oversubscribe it.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if spec.library == "megatron":
        if spec.type in WORDPIECE_TYPES:
            return _HuggingFaceBatch(
                bert_wordpiece(spec.vocab_file, WORDPIECE_TYPES[spec.type]),
                spec.eod_token or _WORDPIECE_EOD,
                segment_cache=False,
                word_cache=True,
            )
        if spec.type not in (None, "GPT2BPETokenizer"):
            raise TokenizerError(
                f"tokenizer_type={spec.type!r}: the megatron library builds {', '.join(MEGATRON_TYPES)}; "
                f"use tokenizer_library=sentencepiece or huggingface for other tokenizers"
            )
        return _HuggingFaceBatch(
            gpt2_bpe(spec.vocab_file, spec.merge_file), spec.eod_token or GPT2_EOD, segment_cache=True
        )
    if spec.library == "sentencepiece":
        if not spec.model or not os.path.isfile(spec.model):
            raise TokenizerError(f"tokenizer_model={spec.model!r}: SentencePiece model file not found")
        return _SentencePieceBatch(spec.model, spec.eod_token)
    if spec.library == "huggingface":
        from tokenizers import Tokenizer as HFTokenizer

        if not spec.model or not os.path.isfile(spec.model):
            raise TokenizerError(f"tokenizer_model={spec.model!r}: tokenizer.json not found")
        with open(spec.model, encoding="utf-8") as handle:
            description = json.load(handle)
        return _HuggingFaceBatch(
            HFTokenizer.from_file(spec.model), spec.eod_token or GPT2_EOD, segment_cache=supports(description)
        )
    raise TokenizerError(f"tokenizer_library={spec.library!r}: expected one of {', '.join(LIBRARIES)}")
