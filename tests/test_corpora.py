"""The tiny BPE in corpora/tiny_bpe is what corpora/make_tiny_bpe.py learns from the committed tiny Pile, and every
program reads it as GPT-2's files are read."""

import importlib.util

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec, load_batch_tokenizer
from nemo_launcher.launch.resolvers import REPO_ROOT

CORPORA = REPO_ROOT / "corpora"


def _make_tiny_bpe():
    spec = importlib.util.spec_from_file_location("make_tiny_bpe", CORPORA / "make_tiny_bpe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_files_are_what_the_script_learns():
    make = _make_tiny_bpe()
    vocab, merges = make.learn(make.tiny_pile_texts(CORPORA / "tiny_pile"))
    assert vocab == (CORPORA / "tiny_bpe" / "vocab.json").read_text(encoding="utf-8")
    assert merges == (CORPORA / "tiny_bpe" / "merges.txt").read_text(encoding="utf-8")


def test_they_load_as_a_gpt2_bpe_with_end_of_text_last():
    bpe = CORPORA / "tiny_bpe"
    tokenizer = load_batch_tokenizer(
        TokenizerSpec("megatron", "GPT2BPETokenizer", str(bpe / "vocab.json"), str(bpe / "merges.txt"))
    )
    assert (tokenizer.vocab_size, tokenizer.eod) == (2048, 2047)
    text = "Permission is granted to copy this License, verbatim: ünïcode 😀"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text and max(ids) < 2047
    assert len(ids) < len(text.encode("utf-8")) / 2  # learnt merges, not bytes alone
