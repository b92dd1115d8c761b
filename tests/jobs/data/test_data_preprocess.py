"""Tokenizing jsonl into Megatron datasets: byte-identical to the one-document-at-a-time reference, readable
by megatron-core, decodable back to the text, resumable after kill -9, and strict or lenient on bad lines."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from nemo_launcher.jobs.data.indexed_format import complete_dataset, read_index_header
from nemo_launcher.jobs.data.shard_builder import MalformedInput, ShardJob, build_shard, parts_dir_for
from tests.jobs.data_support import (  # noqa: F401
    REPO,
    TRICKY_TEXTS,
    corpus,
    gpt2,
    gpt2_files,
    gpt2_spec,
    reference_dataset,
    same_files,
)


def test_segment_cache_matches_per_document_encoding(gpt2):
    texts = TRICKY_TEXTS + [a + b for a in TRICKY_TEXTS[:20] for b in TRICKY_TEXTS[:20]]
    for _ in range(2):  # the second pass is served from the warm cache
        tokens, lengths, errors = gpt2.encode_batch(texts)
        assert not errors
        expected = [gpt2.encode(text) for text in texts]
        assert lengths.tolist() == [len(ids) for ids in expected]
        assert tokens.tolist() == [token for ids in expected for token in ids]


def test_segment_cache_matches_on_random_whitespace_heavy_text(gpt2):
    import random

    rng = random.Random(7)
    alphabet = [
        "a",
        "b",
        "Z",
        "é",
        "日",
        "1",
        "22",
        ".",
        "!",
        "'",
        "'s",
        "'ll",
        " ",
        " ",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        "\u00a0",
        "\u3000",
        "\u2028",
        "\x1c",
        "\x85",
        "\u200b",
        "\ufeff",
        "    ",
    ]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    tokens, lengths, errors = gpt2.encode_batch(texts)
    expected = [gpt2.encode(text) for text in texts]
    assert not errors and lengths.tolist() == [len(ids) for ids in expected]
    assert tokens.tolist() == [token for ids in expected for token in ids]


def test_certain_whitespace_is_whitespace_to_the_tokenizer(gpt2):
    """The finer cuts inside segments rely on these characters being \\s for the GPT-2 pre-tokenizer."""
    import re

    from nemo_launcher.jobs.common.segment_cache import _CERTAIN_WHITESPACE

    characters = re.findall(f"[{_CERTAIN_WHITESPACE}]", "".join(map(chr, range(0x3001))))
    assert (
        len(characters) == 24
    )  # \t \n \v \f \r, space, U+00A0, U+1680, U+2000..U+200A, U+2028/9, U+202F, U+205F, U+3000
    pre_tokenizer = gpt2._hf.pre_tokenizer
    for c in characters:
        pieces = pre_tokenizer.pre_tokenize_str("a" + c + c + "b")
        assert len(pieces) == (3 if c == " " else 4), (repr(c), pieces)


def test_gpt2_ids_are_the_real_gpt2_ids(gpt2):
    assert gpt2.encode("Hello world, the quick brown fox.") == [15496, 995, 11, 262, 2068, 7586, 21831, 13]
    assert gpt2.eod == 50256 and gpt2.dtype == np.uint16
    # A literal end-of-text string in a document is text, as in Megatron-LM's and OpenAI's encoders.
    assert 50256 not in gpt2.encode("a <|endoftext|> b")


@pytest.mark.parametrize("workers, chunk_bytes", [(1, 32 << 20), (1, 7_000), (2, 40_000)])
def test_output_is_byte_identical_to_the_reference(tmp_path, corpus, gpt2, gpt2_spec, workers, chunk_bytes):
    reference_dataset(corpus, str(tmp_path / "reference"), gpt2)
    summary = build_shard(
        ShardJob(corpus, str(tmp_path / "out" / "ours"), chunk_bytes=chunk_bytes),
        gpt2_spec,
        workers=workers,
        progress=False,
    )
    assert same_files(tmp_path / "reference.bin", tmp_path / "out" / "ours.bin")
    assert same_files(tmp_path / "reference.idx", tmp_path / "out" / "ours.idx")
    assert summary.documents > 300 and summary.malformed == 0
    assert not os.path.exists(parts_dir_for(str(tmp_path / "out" / "ours")))


def test_megatron_reads_it_and_tokens_decode_to_the_text(tmp_path, corpus, gpt2, gpt2_spec):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefix = str(tmp_path / "ours")
    build_shard(ShardJob(corpus, prefix, chunk_bytes=50_000), gpt2_spec, workers=1, progress=False)
    dataset = IndexedDataset(prefix)
    with open(corpus, "rb") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    texts = [text for text in texts if gpt2.encode(text)]  # documents without a token are left out
    assert len(dataset) == len(texts) == len(dataset.document_indices) - 1
    for index in (0, 1, 2, len(texts) // 2, len(texts) - 1):
        ids = dataset[index]
        assert ids[-1] == gpt2.eod
        assert gpt2.decode(ids[:-1].tolist()) == texts[index]


def test_complete_output_is_skipped_and_damaged_output_rebuilt(tmp_path, corpus, gpt2_spec):
    prefix = str(tmp_path / "ours")
    job = ShardJob(corpus, prefix, chunk_bytes=100_000)
    first = build_shard(job, gpt2_spec, progress=False)
    assert build_shard(job, gpt2_spec, progress=False).skipped
    with open(prefix + ".bin", "ab") as handle:
        handle.write(b"\0\0")  # a .bin that no longer matches its index is not complete
    assert complete_dataset(prefix) is None
    again = build_shard(job, gpt2_spec, progress=False)
    assert (
        not again.skipped
        and again.tokens == first.tokens
        and complete_dataset(prefix) == (first.documents, first.tokens)
    )


def _malformed_input(tmp_path):
    rows = [
        json.dumps({"text": "first good line"}),
        "{not json",
        json.dumps({"body": "no text key"}),
        "",
        json.dumps({"text": 42}),
        json.dumps(["a", "list"]),
        "   ",
        json.dumps({"text": "second good line"}),
        '{"text": "lone surrogate \\ud800 here"}',
        json.dumps({"text": "third good line"}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(("\n".join(rows) + "\n").encode() + b'{"text": "bad utf-8 \xff"}\n')
    return str(path)


def test_malformed_lines_are_reported_counted_and_skipped(tmp_path, gpt2, gpt2_spec, caplog):
    path = _malformed_input(tmp_path)
    caplog.set_level("WARNING")
    summary = build_shard(ShardJob(path, str(tmp_path / "out"), chunk_bytes=60), gpt2_spec, progress=False)
    assert summary.documents == 3 and summary.malformed == 6
    reported = [record.getMessage() for record in caplog.records]
    for line in (2, 3, 5, 6, 9, 11):
        assert any(message.startswith(f"{path}:{line}: ") for message in reported), (line, reported)
    assert not any(
        f"{path}:{line}:" in message for line in (4, 7) for message in reported
    )  # blank lines are not errors
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(tmp_path / "out"))  # kept alive: its arrays view the dataset's mmap
    texts = [gpt2.decode(dataset[i][:-1].tolist()) for i in range(3)]
    assert texts == ["first good line", "second good line", "third good line"]


def test_malformed_line_is_fatal_when_configured(tmp_path, gpt2_spec):
    path = _malformed_input(tmp_path)
    for chunk_bytes in (60, 1 << 20):  # the line number is counted across chunks
        with pytest.raises(MalformedInput, match=rf"^{path}:2: invalid JSON"):
            build_shard(
                ShardJob(path, str(tmp_path / "out"), on_malformed="fail", chunk_bytes=chunk_bytes),
                gpt2_spec,
                progress=False,
            )
        assert complete_dataset(str(tmp_path / "out")) is None


_KILLABLE = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from nemo_launcher.jobs.data import chunk_encoder
    from nemo_launcher.jobs.data.shard_builder import ShardJob, build_shard
    from nemo_launcher.jobs.common.tokenizer import TokenizerSpec
    slow = chunk_encoder.encode_chunk
    def paced(task, tokenizer=None):  # slow enough that the kill lands mid-run
        time.sleep(0.15)
        return slow(task, tokenizer)
    chunk_encoder.encode_chunk = paced
    spec = TokenizerSpec("megatron", "GPT2BPETokenizer", {vocab!r}, {merges!r})
    build_shard(ShardJob({corpus!r}, {prefix!r}, chunk_bytes=8000), spec, workers=1, progress=False)
""")


def test_kill_9_mid_run_then_rerun_gives_the_complete_output(tmp_path, corpus, gpt2, gpt2_spec, gpt2_files):
    prefix = str(tmp_path / "out" / "ours")
    script = _KILLABLE.format(repo=str(REPO), vocab=gpt2_files[0], merges=gpt2_files[1], corpus=corpus, prefix=prefix)
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    parts = parts_dir_for(prefix)
    deadline = time.monotonic() + 60
    while len([name for name in os.listdir(parts)] if os.path.isdir(parts) else []) < 7:  # plan + 2 whole chunks
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert complete_dataset(prefix) is None
    done_before = {name for name in os.listdir(parts) if name.endswith(".json") and name.startswith("chunk-")}
    assert done_before

    summary = build_shard(ShardJob(corpus, prefix, chunk_bytes=8000), gpt2_spec, workers=1, progress=False)
    assert not summary.skipped
    reference_dataset(corpus, str(tmp_path / "reference"), gpt2)
    assert same_files(tmp_path / "reference.bin", prefix + ".bin")
    assert same_files(tmp_path / "reference.idx", prefix + ".idx")
    assert not os.path.exists(parts)


def test_index_header_records_dtype_and_counts(tmp_path, corpus, gpt2_spec):
    summary = build_shard(ShardJob(corpus, str(tmp_path / "ours")), gpt2_spec, progress=False)
    dtype, sequences, documents = read_index_header(str(tmp_path / "ours.idx"))
    assert dtype == np.uint16 and sequences == documents == summary.documents
