"""Regenerate corpora/tiny_bpe/{vocab.json,merges.txt}: a 2,048-token byte-level BPE in GPT-2's file format,
learnt from the tiny Pile (corpora/tiny_pile), for the tiny GPT of the quick starts and the tests.

    python3 corpora/make_tiny_bpe.py

Why not GPT-2's own 50,257 tokens: a 2-layer model of width 64 then spends about 70% of its training CPU in the
output layer and the softmax over the vocabulary (34 CPU-s for the quick start's 40 steps, against 8 CPU-s with
these 2,048 tokens, measured on the 2-core CI machine). The files have GPT-2's layout, so every program reads them
as it reads GPT-2's (tokenizer type GPT2BPETokenizer): vocab.json maps the 256 byte symbols, then the merged
tokens in merge order, then `<|endoftext|>` last (id 2047, as 50256 is GPT-2's); merges.txt starts with GPT-2's
`#version: 0.2` line. The learning is deterministic (Hugging Face `tokenizers`, one pass over the sorted shards),
so rerunning this reproduces the committed bytes (tests/test_corpora.py checks it).
"""

import json
import pathlib
import sys

import zstandard
from tokenizers import ByteLevelBPETokenizer

VOCAB_SIZE = 2048  # a multiple of 128: megatron pads the vocabulary to one, so nothing is padded
END_OF_TEXT = "<|endoftext|>"
CORPORA = pathlib.Path(__file__).resolve().parent


def tiny_pile_texts(folder: pathlib.Path) -> list[str]:
    texts = []
    for shard in sorted(folder.glob("*.jsonl.zst")):
        for line in zstandard.ZstdDecompressor().decompress(shard.read_bytes()).splitlines():
            texts.append(json.loads(line)["text"])
    return texts


def learn(texts: list[str]) -> tuple[str, str]:
    """(vocab.json text, merges.txt text) of a byte-level BPE with VOCAB_SIZE tokens, END_OF_TEXT the last."""
    bpe = ByteLevelBPETokenizer()
    # One token fewer than VOCAB_SIZE is learnt; END_OF_TEXT takes the last id, where GPT-2 has it.
    bpe.train_from_iterator(texts, vocab_size=VOCAB_SIZE - 1, min_frequency=2, show_progress=False)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    if len(vocab) != VOCAB_SIZE - 1 or END_OF_TEXT in vocab:
        sys.exit(f"learnt {len(vocab)} tokens from the tiny Pile, expected {VOCAB_SIZE - 1}: is the corpus complete?")
    vocab[END_OF_TEXT] = VOCAB_SIZE - 1
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
    return json.dumps(vocab, ensure_ascii=False), "#version: 0.2\n" + "".join(f"{merge}\n" for merge in merges)


def main() -> None:
    vocab, merges = learn(tiny_pile_texts(CORPORA / "tiny_pile"))
    target = CORPORA / "tiny_bpe"
    target.mkdir(exist_ok=True)
    (target / "vocab.json").write_text(vocab, encoding="utf-8")
    (target / "merges.txt").write_text(merges, encoding="utf-8")


if __name__ == "__main__":
    main()
