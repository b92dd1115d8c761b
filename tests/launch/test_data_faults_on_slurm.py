"""Data that yields nothing, on the real local Slurm, as a user submits it: a custom dataset whose raw files are an
empty `.jsonl` and a gzip file named `.jsonl`. The empty file's array task fails naming it (exit 2) and the gzip
one is read decompressed, saying so; the empty dataset written when the user allows it is then refused at launch
as a training's data prefix, before anything is queued."""

import gzip
import json
import subprocess
import time

import pytest

from nemo_launcher.jobs.data import train_tokenizer
from tests.jobs.data.test_data_steps import resolved
from tests.jobs.data_support import gpt2_files, tiny_pile_texts  # noqa: F401  (fixture)

from .conftest import plan_rows


@pytest.fixture
def raw_files(tmp_path):
    """(an empty .jsonl, a gzip file named .jsonl, a SentencePiece model trained here on the same texts)."""
    texts = tiny_pile_texts()[:40]
    plain = tmp_path / "raw" / "plain.jsonl"
    plain.parent.mkdir()
    (tmp_path / "tokenizer").mkdir()
    plain.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    config = resolved(
        "generic/custom_dataset",
        tmp_path / "tokenizer",
        "progress=false",
        f"raw_dataset_files=[{plain}]",
        "train_tokenizer_args.vocab_size=300",
        "preprocess_data=false",
    )
    train_tokenizer.main(["--config", str(config)])
    empty, packed = tmp_path / "raw" / "empty.jsonl", tmp_path / "raw" / "packed.jsonl"
    empty.write_bytes(b"")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    model = tmp_path / "tokenizer" / "data" / "custom_dataset" / "bpe" / "custom_sp_tokenizer.model"
    return empty, packed, model


def _prepare(launch, tmp_path, raw_files, *overrides):
    empty, packed, model = raw_files
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=generic/custom_dataset",
            f"data_dir={tmp_path / 'data'}",
            "data_preparation.train_tokenizer=false",
            f"data_preparation.tokenizer_model={model}",
            f"data_preparation.raw_dataset_files=[{empty},{packed}]",
            "data_preparation.run.node_array_size=2",
            "data_preparation.run.workers_per_node=1",
            "data_preparation.run.cpus_per_node=1",
            "data_preparation.progress=false",
            "cluster.gpus_per_node=null",
            "cluster.exclusive=false",
            *overrides,
        ],
        debug=False,
        results=tmp_path / "results",
    )
    assert code == 0, err
    (job_id,) = [row[2] for row in plan_rows(out)]
    deadline = time.monotonic() + 240
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"array job {job_id} still queued after 240 s"
        time.sleep(0.5)
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    logs = sorted((tmp_path / "results" / "custom_dataset" / "preprocess").glob("log-*"))
    return shown, "".join(log.read_text() for log in logs)


def test_empty_and_gzip_named_raw_files_on_real_slurm(slurm_cluster, launch, tmp_path, raw_files, gpt2_files):  # noqa: F811
    empty, packed, _ = raw_files
    shown, logs = _prepare(launch, tmp_path, raw_files)
    states = sorted(line.split("JobState=")[1].split()[0] for line in shown.splitlines())
    assert states == ["COMPLETED", "FAILED"], shown
    assert "ExitCode=2:0" in shown
    assert f"Error: data_preparation.raw_dataset_files={empty}: the file is empty (0 bytes); " in logs
    assert f"{packed}: gzip-compressed (by its first bytes, not its name); reading it decompressed" in logs
    assert "Traceback" not in logs
    preprocessed = tmp_path / "data" / "custom_dataset" / "preprocessed"
    assert (preprocessed / "packed_text_document.bin").stat().st_size > 0
    assert not (preprocessed / "empty_text_document.bin").exists()

    # Allowed, the empty dataset is written; a training that reads it is refused at launch, nothing queued.
    shown, _ = _prepare(launch, tmp_path, raw_files, "data_preparation.allow_empty_shards=true")
    assert shown.count("JobState=COMPLETED") == 2, shown
    prefix = preprocessed / "empty_text_document"
    code, out, err = launch(
        [
            "stages=[training]",
            "training=gpt3/tiny",
            f"training.model.data.data_prefix=[0.5,{prefix},0.5,{preprocessed / 'packed_text_document'}]",
            f"training.model.tokenizer.vocab_file={gpt2_files[0]}",
            f"training.model.tokenizer.merge_file={gpt2_files[1]}",
            "check_inputs=true",
            "cluster.exclusive=false",
        ],
        debug=False,
        results=tmp_path / "results",
    )
    assert code == 2, (out, err)
    (line,) = [line for line in err.splitlines() if line.startswith("Error:")]
    assert f"{prefix}.bin is empty (0 bytes), a dataset with no document" in line
    assert not (tmp_path / "results" / "gpt3_tiny").exists()
