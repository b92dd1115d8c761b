"""The vocabulary a model will have, read without opening a tokenizer library: its rows are weights, optimizer
state and the output layer's FLOPs.

    vocab, note = padded_vocab_size(model_section, tensor_parallel=2)   # (51200, "GPT2BPETokenizer: 50257 tokens")

Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP so each TP rank holds an equal
slice (megatron/training/tokenizer's _vocab_size_with_padding). The sizes of the file-built tokenizers are those
of the files the seed's data preparation downloads; a Hugging Face tokenizer.json on disk is counted, and a
`padded_vocab_size` or `vocab_size` key of the model section wins over everything.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Tokens of the vocabulary files the reference's configs name.
KNOWN_VOCABULARIES = {
    "GPT2BPETokenizer": 50257,  # GPT-2's vocab.json
    "BertWordPieceLowerCase": 30522,  # bert-large-uncased vocab.txt
    "BertWordPieceCase": 28996,  # bert-large-cased vocab.txt
    "clip": 49408,  # openai/clip-vit-large-patch14
    "mt5_sentencepiece": 250000,  # mT5's SentencePiece model
}
# A SentencePiece or Hugging Face tokenizer that cannot be read here: Llama 2's size, said in the note.
FALLBACK_VOCABULARY = 32000


def _count_tokenizer_json(path: str) -> int | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab") if isinstance(data, dict) else None
    if not isinstance(vocab, (dict, list)):
        return None
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    ids += [token.get("id", -1) for token in data.get("added_tokens") or [] if isinstance(token, dict)]
    return max(ids) + 1 if ids else None


def raw_vocab_size(model: Mapping[str, Any]) -> tuple[int, str]:
    """(tokens before padding, where the number comes from)."""
    for key in ("padded_vocab_size", "vocab_size"):
        if isinstance(model.get(key), int) and model[key] > 0:
            return model[key], f"model.{key}"
    tokenizer = model.get("tokenizer") if isinstance(model.get("tokenizer"), Mapping) else {}
    library, kind = str(tokenizer.get("library") or ""), str(tokenizer.get("type") or "")
    sentinels = int(tokenizer.get("num_sentinel_tokens") or 0)
    if kind in KNOWN_VOCABULARIES:
        known = KNOWN_VOCABULARIES[kind]
        return known + sentinels, f"{kind}: {known} tokens" + (f" + {sentinels} sentinels" if sentinels else "")
    if library == "clip":
        return KNOWN_VOCABULARIES["clip"], "CLIP BPE: 49408 tokens"
    if library == "huggingface" and tokenizer.get("model"):
        counted = _count_tokenizer_json(str(tokenizer["model"]))
        if counted:
            return counted, f"{tokenizer['model']}: {counted} tokens"
    if library == "sentencepiece" and "mt5" in str(tokenizer.get("model") or ""):
        size = KNOWN_VOCABULARIES["mt5_sentencepiece"] + sentinels
        return size, "mT5 SentencePiece: 250000 tokens" + (f" + {sentinels} sentinels" if sentinels else "")
    return FALLBACK_VOCABULARY + sentinels, f"{library or 'unknown'} tokenizer not readable here: assumed 32000 tokens"


def pad_vocab(tokens: int, model: Mapping[str, Any], tensor_parallel: int) -> int:
    multiple = int(model.get("make_vocab_size_divisible_by") or 128) * max(tensor_parallel, 1)
    return -(-tokens // multiple) * multiple


def padded_vocab_size(model: Mapping[str, Any], tensor_parallel: int) -> tuple[int, str]:
    tokens, note = raw_vocab_size(model)
    if isinstance(model.get("padded_vocab_size"), int):
        return tokens, note
    return pad_vocab(tokens, model, tensor_parallel), note
