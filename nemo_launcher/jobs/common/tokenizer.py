"""Tokenizers loaded from files only (compute nodes have no network), for the `model.tokenizer` keys.

    tok = load_tokenizer(library="megatron", type="GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")
    tok.encode("Hello world") -> [15496, 995];  tok.eod -> 50256;  tok.vocab_size -> 50257

| library       | files                                  | end-of-document token                     |
|---------------|----------------------------------------|-------------------------------------------|
| megatron      | GPT-2 BPE vocab.json + merges.txt      | <|endoftext|>                             |
| sentencepiece | model: a SentencePiece .model          | the model's eos piece                     |
| huggingface   | model: a Hugging Face tokenizer.json   | the first of _HF_EOD_CANDIDATES it holds   |

The object also satisfies what megatron-core's GPTDataset asks of a tokenizer (`eod`, `pad`,
`unique_identifiers`), so datasets can be built without megatron's tokenizer classes, which
need `transformers` for Hugging Face files.
"""
from pathlib import Path
from typing import List, Optional

from .config import JobConfigError

LIBRARIES = ("megatron", "sentencepiece", "huggingface")
MEGATRON_TYPES = ("GPT2BPETokenizer",)
GPT2_EOD = "<|endoftext|>"
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


def load_tokenizer(library: str, type: Optional[str] = None, model: Optional[str] = None,
                   vocab_file: Optional[str] = None, merge_file: Optional[str] = None,
                   key: str = "model.tokenizer") -> Tokenizer:
    if library == "megatron":
        if type not in MEGATRON_TYPES:
            raise JobConfigError(f"{key}.type: {type!r} is not supported with library megatron; use one of {', '.join(MEGATRON_TYPES)}")
        return _gpt2_bpe(_existing(vocab_file, f"{key}.vocab_file"), _existing(merge_file, f"{key}.merge_file"))
    if library == "sentencepiece":
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


def _gpt2_bpe(vocab_file: Path, merge_file: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    hf = HFTokenizer(models.BPE.from_file(str(vocab_file), str(merge_file)))
    # GPT-2 maps bytes to printable characters before BPE; no space is prepended to the text.
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    eod = hf.token_to_id(GPT2_EOD)
    if eod is None:
        raise JobConfigError(f"{vocab_file}: the vocabulary has no {GPT2_EOD} token, so documents cannot be separated")
    return Tokenizer(
        encode=lambda text: hf.encode(text).ids, decode=hf.decode,
        vocab_size=hf.get_vocab_size(with_added_tokens=True), eod=eod,
        description={"class": "GPT2BPETokenizer", "vocab_file": str(vocab_file), "merge_file": str(merge_file)},
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
