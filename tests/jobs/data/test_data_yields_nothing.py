"""Data that yields nothing is an error where it is found: the preprocess step stops on an empty file (a custom
dataset's or a Pile shard), a file with no valid line or a zstd file under a plain name (gzip, bz2 and xz under a
plain name are read, with a log line), and the GPT trainer refuses a data prefix it cannot open, naming it, before
anything else.

The step and the trainer run as a user starts them (`python3 -m ... --config <the file the launcher writes>`)."""

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys

import pytest
import yaml
import zstandard
from omegaconf import OmegaConf

from nemo_launcher.jobs.data import train_tokenizer
from nemo_launcher.launch.stage_config import stage_config
from tests.jobs import warm_python
from tests.jobs.data.test_data_steps import resolved
from tests.jobs.data_support import REPO, gpt2_files, same_files, tiny_pile_texts  # noqa: F401  (fixture)

WORDS = "the cat sat on a mat while dogs ran far away from home and birds sang".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(folder, a plain jsonl of 40 documents, a SentencePiece model trained on it by the train_tokenizer step)."""
    folder = tmp_path_factory.mktemp("yields_nothing")
    plain = folder / "plain.jsonl"
    plain.write_text("".join(json.dumps({"text": text}) + "\n" for text in tiny_pile_texts()[:40]))
    config = resolved(
        "generic/custom_dataset",
        folder,
        "progress=false",
        f"raw_dataset_files=[{plain}]",
        "train_tokenizer_args.vocab_size=300",
        "preprocess_data=false",
    )
    train_tokenizer.main(["--config", str(config)])
    return folder, plain, folder / "data" / "custom_dataset" / "bpe" / "custom_sp_tokenizer.model"


def _preprocess(corpus, tmp_path, raw, *overrides):
    """Runs the preprocess step on `raw` alone; (exit status, its output (stdout, then stderr), the output prefix)."""
    _, _, model = corpus
    config = resolved(
        "generic/custom_dataset",
        tmp_path,
        "progress=false",
        "train_tokenizer=false",
        f"tokenizer_model={model}",
        f"raw_dataset_files=[{raw}]",
        "run.node_array_size=1",
        "run.workers_per_node=1",
        *overrides,
    )
    env = {k: v for k, v in os.environ.items() if k != "SLURM_ARRAY_TASK_ID"}
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.data.preprocess", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
    )
    stem = raw.name.split(".")[0]
    return (
        result.returncode,
        result.stdout + result.stderr,
        tmp_path / "data" / "custom_dataset" / "preprocessed" / f"{stem}_text_document",
    )


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_an_empty_file_stops_the_step_naming_it(corpus, tmp_path):
    raw = tmp_path / "empty.jsonl"
    raw.write_bytes(b"")
    code, err, prefix = _preprocess(corpus, tmp_path, raw)
    assert code == 2, err
    assert _last_line(err) == (
        f"Error: data_preparation.raw_dataset_files={raw}: the file is empty (0 bytes); give it JSON lines with a "
        "string under json_key 'text', leave it out, or set data_preparation.allow_empty_shards=true to write an "
        "empty dataset for it anyway"
    )
    assert not prefix.parent.exists() or not any(prefix.parent.iterdir())  # nothing written, not even scratch


def test_a_file_with_no_valid_line_names_the_file_and_the_counts(corpus, tmp_path):
    raw = tmp_path / "junk.jsonl"
    raw.write_text('not json\n{"title": "no text key"}\n\n{"text": 7}\n')
    code, err, prefix = _preprocess(corpus, tmp_path, raw)
    assert code == 2, err
    assert _last_line(err).startswith(
        f"Error: data_preparation.raw_dataset_files={raw}: 0 documents from 4 lines: 3 malformed, 1 blank; "
    )
    assert not os.path.exists(f"{prefix}.bin")


def test_allow_empty_shards_writes_the_empty_dataset(corpus, tmp_path):
    raw = tmp_path / "empty.jsonl"
    raw.write_bytes(b"")
    code, err, prefix = _preprocess(corpus, tmp_path, raw, "allow_empty_shards=true")
    assert code == 0, err
    assert os.path.getsize(f"{prefix}.bin") == 0 and os.path.isfile(f"{prefix}.idx")


@pytest.mark.parametrize("kind, compress", [("gzip", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)])
def test_a_compressed_file_under_a_plain_name_is_read_and_said_so(corpus, tmp_path, kind, compress):
    _, plain, _ = corpus
    raw = tmp_path / "packed.jsonl"
    raw.write_bytes(compress(plain.read_bytes()))
    code, err, prefix = _preprocess(corpus, tmp_path, raw)
    assert code == 0, err
    assert f"{raw}: {kind}-compressed (by its first bytes, not its name); reading it decompressed" in err
    reference = tmp_path / "reference"
    reference.mkdir()
    code, err, expected = _preprocess(corpus, reference, plain)
    assert code == 0, err
    assert same_files(f"{prefix}.bin", f"{expected}.bin") and same_files(f"{prefix}.idx", f"{expected}.idx")


def test_zstd_under_a_plain_name_is_refused_with_the_rename(corpus, tmp_path):
    _, plain, _ = corpus
    raw = tmp_path / "packed.jsonl"
    raw.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    code, err, _ = _preprocess(corpus, tmp_path, raw)
    assert code == 2, err
    assert _last_line(err) == (
        f"Error: data_preparation.raw_dataset_files={raw}: the file is zstd-compressed (its first bytes say so) but "
        "its name does not end in .zst; rename it to packed.jsonl.zst, or decompress it (zstd -d)"
    )


def _train(tmp_path, prefix, gpt2_files) -> subprocess.CompletedProcess:  # noqa: F811
    """The GPT trainer on the tiny config with `prefix` as its whole blend."""
    section = stage_config("training", "gpt3/tiny", tmp_path / "data", tmp_path / "results")
    section["model"]["tokenizer"]["vocab_file"], section["model"]["tokenizer"]["merge_file"] = gpt2_files
    section["model"]["data"]["data_prefix"] = [1.0, str(prefix)]
    OmegaConf.save(OmegaConf.create(section), tmp_path / "train.yaml")
    command = [warm_python.interpreter(), "-u", "-m", "nemo_launcher.jobs.gpt.train", "--config"]
    return subprocess.run(
        [*command, str(tmp_path / "train.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=warm_python.environment(dict(os.environ)),
    )


def test_training_refuses_an_empty_dataset_naming_its_prefix(corpus, tmp_path, gpt2_files):  # noqa: F811
    raw = tmp_path / "empty.jsonl"
    raw.write_bytes(b"")
    code, err, prefix = _preprocess(corpus, tmp_path, raw, "allow_empty_shards=true")
    assert code == 0, err
    result = _train(tmp_path, prefix, gpt2_files)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"Error: model.data.data_prefix={prefix}: {prefix}.bin is empty (0 bytes), a dataset with no document; "
        "rerun its data preparation on input that holds documents, or leave this prefix out of the blend\n"
    )


def test_training_refuses_an_index_cut_short_naming_its_prefix(corpus, tmp_path, gpt2_files):  # noqa: F811
    _, plain, _ = corpus
    code, err, prefix = _preprocess(corpus, tmp_path, plain)
    assert code == 0, err
    index = f"{prefix}.idx"
    with open(index, "r+b") as handle:
        handle.truncate(20)  # inside the header: the count of sequences is cut in two
    result = _train(tmp_path, prefix, gpt2_files)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()  # one line: no traceback of megatron-core's after it
    assert line.startswith(f"Error: model.data.data_prefix={prefix}: {prefix}.bin/.idx cannot be opened")
    assert line.endswith("; rerun the data preparation that writes it")


def test_the_shipped_config_documents_the_key_and_refuses_empty_data_by_default():
    text = (REPO / "conf" / "data_preparation" / "generic" / "custom_dataset.yaml").read_text()
    assert yaml.safe_load(text)["allow_empty_shards"] is False
    assert "allow_empty_shards: False  # False: a raw file that yields no document" in text


def test_an_empty_pile_shard_stops_the_step_and_the_pile_configs_take_the_key(tmp_path, monkeypatch):
    from nemo_launcher.jobs.data import download, extract

    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    config = resolved("gpt3/tiny_pile", tmp_path, "progress=false", "file_numbers=0")
    for step in (download, extract):
        step.main(["--config", str(config)])
    shard = tmp_path / "data" / "tiny_pile" / "extracted" / "00.jsonl"
    shard.write_bytes(b"")  # an extraction that produced nothing
    command = [sys.executable, "-m", "nemo_launcher.jobs.data.preprocess", "--config", str(config)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"Error: data_preparation.file_numbers=0 ({shard}): the file is empty (0 bytes); ")
    allowed = resolved("gpt3/tiny_pile", tmp_path, "progress=false", "file_numbers=0", "allow_empty_shards=true")
    command[-1] = str(allowed)
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    assert os.path.getsize(tmp_path / "data" / "tiny_pile" / "preprocessed" / "tiny_pile_00_text_document.bin") == 0
