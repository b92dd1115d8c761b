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
"""
from pathlib import Path
from typing import Dict, List, Optional

from .config import JobConfigError

LIBRARIES = ("megatron", "sentencepiece", "huggingface")
WORDPIECE_TYPES = {"BertWordPieceCase": False, "BertWordPieceLowerCase": True}  # type -> lower-cases the text
MEGATRON_TYPES = ("GPT2BPETokenizer",) + tuple(WORDPIECE_TYPES)
GPT2_EOD = "<|endoftext|>"
# The specials a WordPiece vocab.txt must hold; BERT's datasets need each of them.
_WORDPIECE_REQUIRED = {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"}
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

    def encode(self, text: str) -> List[int]:
        return self._encode(text)

    def decode(self, ids: List[int]) -> str:
        return self._decode(ids)


class MaskingTokenizer(Tokenizer):
    """A tokenizer for masked-language-model data (megatron-core's BERT and T5 datasets): special token ids,
    `inv_vocab` (id -> token, every id) and `additional_special_tokens_ids` (T5's sentinels, in order)."""

    def __init__(self, encode, decode, inv_vocab: Dict[int, str], specials: Dict[str, int], sentinels: List[int],
                 eod: int, description: dict):
        super().__init__(encode, decode, len(inv_vocab), eod, description)
        self.inv_vocab = inv_vocab
        self.vocab = {token: index for index, token in inv_vocab.items()}
        self.cls, self.sep, self.mask = specials["cls"], specials["sep"], specials["mask"]
        self.pad, self.bos, self.eos = specials["pad"], specials["bos"], specials["eos"]
        self.additional_special_tokens_ids = list(sentinels)
        # megatron-core checks the pad id against these (MegatronDataset): pad must collide with none of them.
        self.special_tokens_dict = {"cls_token": self.cls, "sep_token": self.sep, "mask_token": self.mask,
                                    "pad_token": self.pad, "bos_token": self.bos, "eos_token": self.eos}


def load_tokenizer(library: str, type: Optional[str] = None, model: Optional[str] = None,
                   vocab_file: Optional[str] = None, merge_file: Optional[str] = None,
                   key: str = "model.tokenizer", num_sentinel_tokens: int = 0,
                   sentencepiece_legacy: bool = True, delimiter: Optional[str] = None) -> Tokenizer:
    """`delimiter`: the reference's tabular-tokenizer key, which the GPT schema holds at null (no tokenizer here reads it).
    `num_sentinel_tokens`: T5's sentinels (100 for T5 and mT5; 0 for GPT and BERT). `sentencepiece_legacy`:
    special tokens a SentencePiece model lacks are added after it (else their absence is an error)."""
    if isinstance(num_sentinel_tokens, bool) or not isinstance(num_sentinel_tokens, int) or num_sentinel_tokens < 0:
        raise JobConfigError(f"{key}.num_sentinel_tokens: {num_sentinel_tokens!r} must be a non-negative integer")
    if library == "megatron":
        if type not in MEGATRON_TYPES:
            raise JobConfigError(f"{key}.type: {type!r} is not supported with library megatron; use one of {', '.join(MEGATRON_TYPES)}")
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


def _existing(path: Optional[str], key: str) -> Path:
    if not path:
        raise JobConfigError(f"{key}: a file is required for this tokenizer library")
    if not Path(path).is_file():
        raise JobConfigError(f"{key}: {path} does not exist")
    return Path(path)


def gpt2_bpe_pipeline(vocab_file: str, merge_file: str):
    """The GPT-2 byte-level BPE as a Hugging Face tokenizer, built from the two files alone; training and data
    preparation (jobs/data/tokenizer.py) both encode with it.

    No special tokens are registered, as in Megatron-LM's and OpenAI's GPT-2 encoders: a literal
    "<|endoftext|>" inside a document is encoded as text, and only the EOD that preprocessing appends is 50256.
    """
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers  # deferred: Rust library

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
        encode=lambda text: hf.encode(text).ids, decode=hf.decode,
        vocab_size=hf.get_vocab_size(with_added_tokens=True), eod=eod,
        description={"class": "GPT2BPETokenizer", "vocab_file": str(vocab_file), "merge_file": str(merge_file)},
    )


def wordpiece_pipeline(vocab_file: str, lower_case: bool):
    """BERT's WordPiece as Megatron-LM's BertWordPiece tokenizers encode (a Hugging Face tokenizer).

    Google's BERT pipeline: drop control characters, put spaces around CJK ideographs, lower-case and strip
    accents (LowerCase only), split at whitespace and punctuation, then greedy longest-match WordPiece with [UNK]
    for words it cannot cover or longer than 200 characters (the limit of Megatron-LM's and Google's tokenizers;
    Hugging Face's BertTokenizer uses 100). The special tokens are not registered as added tokens, so "[CLS]"
    written in a text is text. Data preparation (jobs/data/tokenizer.py) encodes with this same pipeline.
    """
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, normalizers, pre_tokenizers

    hf = HFTokenizer(models.WordPiece.from_file(str(vocab_file), unk_token="[UNK]", max_input_chars_per_word=200))
    hf.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                               lowercase=lower_case)
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
        raise JobConfigError(f"{key}.vocab_file: {vocab_file} has no {', '.join(missing)}; BERT and T5 data need "
                             f"[PAD] [UNK] [CLS] [SEP] [MASK] (is it a BERT WordPiece vocab.txt?)")

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
        inv_vocab=inv_vocab, specials=specials, sentinels=sentinel_ids, eod=specials["sep"],
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
        raise JobConfigError(f"{key}.model: {model_file} has {len(present)} of the {sentinels} pieces <extra_id_N> "
                             f"(num_sentinel_tokens); it must have all or none")
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
    specials = {"cls": token_id(-1, "<cls>", "[CLS]"), "sep": token_id(-1, "<sep>", "[SEP]"),
                "mask": token_id(-1, "<mask>", "[MASK]"), "bos": token_id(sp.bos_id(), "<bos>", "<s>"),
                "pad": token_id(sp.pad_id(), "<pad>"), "eos": sp.eos_id()}
    if missing and not legacy:
        raise JobConfigError(f"{key}.model: {model_file} lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; "
                             f"add them to the model, or set {key}.sentencepiece_legacy=true to add them after it")
    return MaskingTokenizer(
        encode=lambda text: sp.encode(text),
        # Added ids are not pieces of the model: decoding shows the model's pieces only.
        decode=lambda ids_: sp.decode([int(i) for i in ids_ if int(i) < pieces]),
        inv_vocab=dict(sorted(inv_vocab.items())), specials=specials, sentinels=sentinel_ids, eod=sp.eos_id(),
        description={"class": "SentencePieceTokenizer", "model": str(model_file), "num_sentinel_tokens": sentinels,
                     "legacy": legacy},
    )


def _sentencepiece(model_file: Path) -> Tokenizer:
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    eod = sp.eos_id()
    if eod < 0:
        raise JobConfigError(f"{model_file}: the SentencePiece model has no eos piece, so documents cannot be separated")
    return Tokenizer(
        encode=lambda text: sp.encode(text), decode=sp.decode, vocab_size=sp.get_piece_size(), eod=eod,
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
        raise JobConfigError(f"{key}.model: {tokenizer_json} has none of the end-of-document tokens {', '.join(_HF_EOD_CANDIDATES)}")
    return Tokenizer(
        # Special tokens are added by the data pipeline (the eod), not by the tokenizer's post-processor.
        encode=lambda text: hf.encode(text, add_special_tokens=False).ids, decode=hf.decode,
        vocab_size=hf.get_vocab_size(with_added_tokens=True), eod=eod,
        description={"class": "HuggingFaceTokenizer", "model": str(tokenizer_json)},
    )
