"""BERT and T5 data: WordPiece encoding through the word cache, one indexed item per sentence, byte-identical to
Megatron-LM's --split-sentences writer, resumable after kill -9, and sampled by megatron-core's BERT and T5 datasets."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec
from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer
from nemo_launcher.jobs.data.indexed_format import complete_dataset
from nemo_launcher.jobs.data.sentences import split_sentences
from nemo_launcher.jobs.data.shard_builder import ShardJob, build_shard, parts_dir_for
from tests.jobs.data_support import (  # noqa: F401
    REPO,
    TRICKY_TEXTS,
    corpus,
    reference_sentence_dataset,
    same_files,
    tiny_pile_texts,
    train_wordpiece_vocab,
    wordpiece,
    wordpiece_spec,
    wordpiece_vocab,
)

# Texts that stress WordPiece's normalizer at the cuts: accents and combining marks next to spaces, final
# sigma, dotted capital I, control and zero-width characters, CJK, words over the 200-character limit.
WORDPIECE_TEXTS = TRICKY_TEXTS + [
    "é e\u0301 \u0301x É",
    "ΣΑΣ ΑΣ Σ σς",
    "İstanbul İ",
    "Straße ﬁne",
    "a\x00b \ufffd c\x1cd",
    "日本語 中文 한국어",
    "x" * 199 + " " + "y" * 200 + " " + "z" * 201,
    "[CLS] [SEP] [MASK] [PAD]",
    "don't stop-me now!!",
]


@pytest.mark.parametrize("lower_case", [True, False])
def test_word_cache_matches_per_document_encoding(tmp_path, lower_case):
    vocab = train_wordpiece_vocab(tmp_path / "vocab.txt", lower_case=lower_case)
    tokenizer = load_tokenizer(
        TokenizerSpec("megatron", "BertWordPieceLowerCase" if lower_case else "BertWordPieceCase", vocab_file=vocab)
    )
    rng = random.Random(5)
    alphabet = [
        "a",
        "B",
        "é",
        "É",
        "e\u0301",
        " ",
        " ",
        "  ",
        "\n",
        "\t",
        "\u00a0",
        "\u3000",
        "日",
        "Σ",
        "ς",
        "İ",
        "\u0301",
        "\x1c",
        "\x85",
        "\u200b",
        "!",
        ".",
        "'s",
        "12",
        "ﬁ",
        "\x00",
        "w" * 120,
    ]
    texts = (
        tiny_pile_texts()
        + WORDPIECE_TEXTS
        + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(4000)]
    )
    for _ in range(2):  # the second pass is served from the warm cache
        tokens, lengths, errors = tokenizer.encode_batch(texts)
        expected = [tokenizer.encode(text) for text in texts]
        assert not errors and lengths.tolist() == [len(ids) for ids in expected]
        assert tokens.tolist() == [token for ids in expected for token in ids]


def test_sentences_encode_to_the_tokens_of_their_document(wordpiece):
    """Sentence boundaries are at whitespace, which WordPiece never crosses: items join up to the document."""
    for text in tiny_pile_texts() + WORDPIECE_TEXTS:
        assert [t for sentence in split_sentences(text) for t in wordpiece.encode(sentence)] == wordpiece.encode(text)


def test_wordpiece_ids_are_bert_ids(wordpiece, wordpiece_vocab):
    vocab = open(wordpiece_vocab, encoding="utf-8").read().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ids = wordpiece.encode("The Licensee shall NOT distribute it.")
    assert [vocab[i] for i in ids][:3] == ["the", "licensee", "shall"] and vocab[ids[-1]] == "."
    assert wordpiece.eod == 3 and wordpiece.vocab_size == len(vocab)  # [SEP] ends documents when EOD is asked for
    assert vocab[wordpiece.encode("[CLS]")[0]] == "["  # special tokens written in a text are text


@pytest.mark.parametrize(
    "workers, chunk_bytes, append_eod, cap",
    [
        (1, 32 << 20, False, 512),
        (1, 7_000, True, 512),
        (2, 30_000, False, 16),
        (1, 50_000, True, None),
    ],
)
def test_sentence_dataset_is_byte_identical_to_the_reference(
    tmp_path, corpus, wordpiece, wordpiece_spec, workers, chunk_bytes, append_eod, cap
):
    reference_sentence_dataset(
        corpus, str(tmp_path / "reference"), wordpiece, append_eod=append_eod, max_sentence_tokens=cap
    )
    job = ShardJob(
        corpus,
        str(tmp_path / "out" / "ours"),
        chunk_bytes=chunk_bytes,
        append_eod=append_eod,
        split_sentences=True,
        max_sentence_tokens=cap,
    )
    summary = build_shard(job, wordpiece_spec, workers=workers, progress=False)
    assert same_files(tmp_path / "reference.bin", tmp_path / "out" / "ours.bin")
    assert same_files(tmp_path / "reference.idx", tmp_path / "out" / "ours.idx")
    assert summary.documents > 200 and summary.malformed == 0


def test_megatron_reads_sentences_grouped_by_document(tmp_path, corpus, wordpiece, wordpiece_spec):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefix = str(tmp_path / "ours")
    build_shard(
        ShardJob(corpus, prefix, append_eod=False, split_sentences=True, max_sentence_tokens=64),
        wordpiece_spec,
        progress=False,
    )
    dataset = IndexedDataset(prefix)
    texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
    texts = [text for text in texts if wordpiece.encode(text)]
    assert len(dataset.document_indices) - 1 == len(texts) < len(dataset)
    assert int(dataset.sequence_lengths.max()) <= 64
    for number in (0, 1, len(texts) // 2, len(texts) - 1):
        first, last = dataset.document_indices[number], dataset.document_indices[number + 1]
        items = [dataset[i].tolist() for i in range(first, last)]
        expected = [ids for ids in map(wordpiece.encode, split_sentences(texts[number])) if ids]
        assert [t for ids in items for t in ids] == [t for ids in expected for t in ids]
        if all(len(ids) <= 64 for ids in expected):
            assert items == expected


def test_a_document_the_tokenizer_rejects_is_left_out_whole(tmp_path, wordpiece, wordpiece_spec):
    path = tmp_path / "in.jsonl"
    rows = [
        {"text": "First document. It is fine."},
        {"text": "Second one. Its second sentence \ud800 is not."},
        {"text": "   "},
        {"text": "Third. Fine too."},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = build_shard(
        ShardJob(str(path), str(tmp_path / "out"), append_eod=False, split_sentences=True),
        wordpiece_spec,
        progress=False,
    )
    assert (summary.documents, summary.malformed) == (2, 1)
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(tmp_path / "out"))
    assert [wordpiece.decode(dataset[i].tolist()) for i in range(len(dataset))] == [
        "first document.",
        "it is fine.",
        "third.",
        "fine too.",
    ]


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
    spec = TokenizerSpec("megatron", "BertWordPieceLowerCase", vocab_file={vocab!r})
    build_shard(ShardJob({corpus!r}, {prefix!r}, chunk_bytes=8000, append_eod=False, split_sentences=True), spec,
                workers=1, progress=False)
""")


def test_kill_9_mid_run_then_rerun_gives_the_same_bytes(tmp_path, corpus, wordpiece, wordpiece_spec, wordpiece_vocab):
    prefix = str(tmp_path / "out" / "ours")
    script = _KILLABLE.format(repo=str(REPO), vocab=wordpiece_vocab, corpus=corpus, prefix=prefix)
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    parts = parts_dir_for(prefix)
    deadline = time.monotonic() + 60
    while len(os.listdir(parts) if os.path.isdir(parts) else []) < 9:  # plan + 2 whole chunks of 4 files
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert complete_dataset(prefix) is None
    assert any(name.endswith(".sentences") for name in os.listdir(parts))
    stamps = {
        name: os.stat(os.path.join(parts, name)).st_mtime_ns for name in os.listdir(parts) if name.endswith(".json")
    }

    build_shard(
        ShardJob(corpus, prefix, chunk_bytes=8000, append_eod=False, split_sentences=True),
        wordpiece_spec,
        workers=1,
        progress=False,
    )
    reference_sentence_dataset(corpus, str(tmp_path / "reference"), wordpiece, max_sentence_tokens=512)
    assert same_files(tmp_path / "reference.bin", prefix + ".bin")
    assert same_files(tmp_path / "reference.idx", prefix + ".idx")
    assert stamps and not os.path.exists(parts)  # the finished chunks were kept (not redone), then cleaned up


_MEGATRON_SAMPLES = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    import torch
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset, BERTMaskedWordPieceDatasetConfig
    from megatron.core.datasets.t5_dataset import T5MaskedWordPieceDataset, T5MaskedWordPieceDatasetConfig
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer
    masking = dict(random_seed=1234, sequence_length=128, blend=([{prefix!r}], [1.0]), split="80,10,10",
                   path_to_cache={cache!r}, masking_probability=0.15, short_sequence_probability=0.1,
                   masking_max_ngram=3, masking_do_full_word=True, masking_do_permutation=False,
                   masking_use_longer_ngrams=False, masking_use_geometric_distribution=False)
    out = {{}}
    bert = load_tokenizer("megatron", "BertWordPieceLowerCase", vocab_file={vocab!r})
    config = BERTMaskedWordPieceDatasetConfig(classification_head=True, tokenizer=bert, **masking)
    train = BlendedMegatronDatasetBuilder(BERTMaskedWordPieceDataset, [50, 5, 5], lambda: True, config).build()[0]
    sample = train[0]
    out["bert"] = [int(t) for t in sample["text"]], int(sample["loss_mask"].sum())
    t5 = load_tokenizer("megatron", "BertWordPieceLowerCase", vocab_file={vocab!r}, num_sentinel_tokens=100)
    config = T5MaskedWordPieceDatasetConfig(sequence_length_decoder=64, tokenizer=t5, **masking)
    train = BlendedMegatronDatasetBuilder(T5MaskedWordPieceDataset, [50, 5, 5], lambda: True, config).build()[0]
    sample = train[0]
    out["t5"] = [int(t) for t in sample["text_enc"]], [int(t) for t in sample["text_dec"]]
    out["specials"] = bert.cls, bert.sep, t5.additional_special_tokens_ids[:3], t5.bos
    print(json.dumps(out))
""")


def test_megatron_bert_and_t5_datasets_sample_it(tmp_path, corpus, wordpiece_spec, wordpiece_vocab):
    prefix = str(tmp_path / "ours")
    build_shard(ShardJob(corpus, prefix, append_eod=False, split_sentences=True), wordpiece_spec, progress=False)
    script = _MEGATRON_SAMPLES.format(
        repo=str(REPO), prefix=prefix, cache=str(tmp_path / "cache"), vocab=wordpiece_vocab
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    (cls, sep, sentinels, bos) = out["specials"]
    tokens, masked = out["bert"]
    assert tokens[0] == cls and tokens.count(sep) == 2 and masked > 0  # [CLS] A [SEP] B [SEP], some tokens masked
    encoder, decoder = out["t5"]
    assert decoder[0] == bos and decoder[1] == sentinels[0] and sentinels[0] in encoder


@pytest.mark.parametrize("plan_text", ['{"identity": {"inp', "[1, 2]", '{"bounds": []}'])
def test_an_unreadable_chunk_plan_starts_the_work_over(tmp_path, corpus, plan_text):
    from nemo_launcher.jobs.data.shard_builder import _chunk_plan

    job = ShardJob(corpus, str(tmp_path / "ours"), chunk_bytes=8000, append_eod=False)
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "plan.json").write_text(plan_text)
    (parts / "00000.bin").write_bytes(b"a chunk of some other plan")
    bounds = _chunk_plan(job, str(parts))
    assert bounds[0][0] == 0 and bounds[-1][1] == os.path.getsize(corpus) and len(bounds) > 1
    assert sorted(os.listdir(parts)) == ["plan.json"]
    assert [tuple(b) for b in json.loads((parts / "plan.json").read_text())["bounds"]] == bounds
