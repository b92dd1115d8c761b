"""The step programs on the shipped configs: tiny Pile end to end, reruns, Slurm array tasks, custom datasets."""

import gzip
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec
from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer
from nemo_launcher.jobs.data import download, extract, preprocess, train_tokenizer
from nemo_launcher.jobs.data.indexed_format import complete_dataset
from nemo_launcher.launch.families import FAMILIES
from tests.jobs.data_support import REPO, reference_dataset, same_files, tiny_pile_texts

CONF = REPO / "conf"
# The configs these step programs run (the multimodal family has its own: tests/jobs/multimodal/test_multimodal_*.py).
DATA_CONFIGS = sorted(
    str(p.relative_to(CONF / "data_preparation").with_suffix(""))
    for p in (CONF / "data_preparation").rglob("*.yaml")
    # A seed's spelling at the group's top (custom_dataset) is an alias of a family config listed already.
    # The preference sets (rlhf) run steps of their own: tests/jobs/data/test_preference_*.py.
    if p.parent.name in FAMILIES
    and FAMILIES[p.parent.name].programs["data_preparation"] == "nemo_launcher.jobs.data"
    and FAMILIES[p.parent.name].schemas["data_preparation"].endswith("data_preparation:DataPreparation")
)


def resolved(choice: str, tmp_path: pathlib.Path, *overrides: str) -> pathlib.Path:
    """The data_preparation section as the launcher writes it: composed by Hydra, every ${...} resolved."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                f"data_preparation={choice}",
                f"launcher_scripts_path={REPO}",
                f"data_dir={tmp_path}/data",
                f"base_results_dir={tmp_path}/results",
                *[f"+data_preparation.{o[1:]}" if o.startswith("+") else f"data_preparation.{o}" for o in overrides],
            ],
        )
    values = OmegaConf.to_container(cfg.data_preparation, resolve=True)
    path = tmp_path / f"{values['run']['name']}_hydra.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("choice", DATA_CONFIGS)
def test_every_shipped_data_config_composes_and_resolves(choice, tmp_path):
    values = yaml.safe_load(resolved(choice, tmp_path).read_text())
    for key in ("name", "results_dir", "time_limit", "dependency", "node_array_size", "workers_per_node"):
        assert key in values["run"], key
    assert values["dataset"] in preprocess.DATASETS
    assert values["on_malformed"] in ("skip", "fail") and values["json_key"]


def test_tiny_pile_end_to_end_writes_what_tiny_training_reads(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    config = str(resolved("gpt3/tiny_pile", tmp_path, "progress=false"))
    for step in (download, extract, preprocess):
        step.main(["--config", config])
    data = tmp_path / "data"
    vocab, merges = data / "bpe" / "vocab.json", data / "bpe" / "merges.txt"
    assert vocab.is_file() and merges.is_file()  # the paths conf/training/gpt3/tiny.yaml reads
    outputs = sorted((data / "tiny_pile" / "preprocessed").glob("*.idx"))
    assert [p.name for p in outputs] == [f"tiny_pile_{n:02d}_text_document.idx" for n in range(3)]
    tokenizer = load_tokenizer(TokenizerSpec("megatron", "GPT2BPETokenizer", str(vocab), str(merges)))
    for number in range(3):
        prefix = data / "tiny_pile" / "preprocessed" / f"tiny_pile_{number:02d}_text_document"
        reference_dataset(
            str(data / "tiny_pile" / "extracted" / f"{number:02d}.jsonl"), str(tmp_path / "ref"), tokenizer
        )
        assert same_files(str(prefix) + ".bin", tmp_path / "ref.bin")
        assert same_files(str(prefix) + ".idx", tmp_path / "ref.idx")
    assert sum(complete_dataset(str(p.with_suffix("")))[0] for p in outputs) == len(tiny_pile_texts())

    # The training side's automatic blend finds exactly these datasets.
    from nemo_launcher.jobs.common.data_blend import auto_blend

    assert auto_blend(data / "tiny_pile" / "preprocessed", 0.7)[1::2] == [str(p.with_suffix("")) for p in outputs]

    # A rerun after removing the intermediate files skips every shard instead of failing for missing inputs.
    for path in (data / "tiny_pile" / "raw").iterdir():
        path.unlink()
    for path in (data / "tiny_pile" / "extracted").iterdir():
        path.unlink()
    stamps = [p.stat().st_mtime_ns for p in outputs]
    for step in (download, extract, preprocess):
        step.main(["--config", config])
    assert [p.stat().st_mtime_ns for p in outputs] == stamps
    assert not any((data / "tiny_pile" / "raw").iterdir())


def test_slurm_array_task_handles_only_its_shard(tmp_path, monkeypatch):
    config = str(resolved("gpt3/tiny_pile", tmp_path, "progress=false", "rm_downloaded=true", "rm_extracted=true"))
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    for step in (download, extract, preprocess):
        step.main(["--config", config])
    data = tmp_path / "data" / "tiny_pile"
    assert [p.name for p in (data / "preprocessed").glob("*.idx")] == ["tiny_pile_01_text_document.idx"]
    assert not list((data / "raw").iterdir()) and not list((data / "extracted").iterdir())  # rm_downloaded/extracted


def test_step_errors_are_one_line_and_exit_2(tmp_path):
    config = resolved("gpt3/tiny_pile", tmp_path, "progress=false", "file_numbers='0,2-1'")
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.data.download", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: data_preparation.file_numbers='0,2-1': range '2-1' ends before it starts"
    )
    config = resolved("gpt3/tiny_pile", tmp_path, "progress=false", "file_numbers=7")
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.data.download", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2 and "07.jsonl.zst: no such file" in result.stderr


def _raw_files(tmp_path):
    texts = tiny_pile_texts()
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "big.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:120]))
    with gzip.open(raw / "small.json.gz", "wt") as handle:
        handle.write("".join(json.dumps({"text": t}) + "\n" for t in texts[120:160]))
    (raw / "medium.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[160:]))
    return [str(raw / "big.jsonl"), str(raw / "small.json.gz"), str(raw / "medium.jsonl")]


def test_custom_dataset_trains_sentencepiece_then_spreads_files_over_nodes(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    files = _raw_files(tmp_path)
    config = str(
        resolved(
            "generic/custom_dataset",
            tmp_path,
            "progress=false",
            f"raw_dataset_files=[{','.join(files)}]",
            "train_tokenizer_args.vocab_size=500",
            "run.node_array_size=2",
            "run.workers_per_node=1",
        )
    )
    train_tokenizer.main(["--config", config])
    model = tmp_path / "data" / "custom_dataset" / "bpe" / "custom_sp_tokenizer.model"
    assert model.is_file()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")  # node 0 gets the largest file
    preprocess.main(["--config", config])
    out = tmp_path / "data" / "custom_dataset" / "preprocessed"
    assert sorted(p.name for p in out.glob("*.idx")) == ["big_text_document.idx"]
    mapping = json.loads((tmp_path / "data" / "custom_dataset" / "preprocess_mapping").read_text())
    assert mapping == {"0": [files[0]], "1": [files[2], files[1]]}
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    preprocess.main(["--config", config])
    assert sorted(p.name for p in out.glob("*.idx")) == [
        "big_text_document.idx",
        "medium_text_document.idx",
        "small_text_document.idx",
    ]
    assert not (out / ".decompressed").exists()

    tokenizer = load_tokenizer(TokenizerSpec("sentencepiece", model=str(model)))
    assert tokenizer.eod == 3  # eos_id from train_tokenizer_args
    plain = tmp_path / "small.jsonl"
    plain.write_bytes(gzip.open(files[1]).read())
    reference_dataset(str(plain), str(tmp_path / "ref"), tokenizer)
    assert same_files(out / "small_text_document.bin", tmp_path / "ref.bin")
    assert same_files(out / "small_text_document.idx", tmp_path / "ref.idx")


def test_custom_dataset_with_a_byte_level_bpe_trained_by_hugging_face(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    files = _raw_files(tmp_path)[::2]
    model = tmp_path / "data" / "custom_dataset" / "bpe" / "tokenizer.json"
    config = str(
        resolved(
            "generic/custom_dataset",
            tmp_path,
            "progress=false",
            f"raw_dataset_files=[{','.join(files)}]",
            "tokenizer_library=huggingface",
            f"tokenizer_model={model}",
            "train_tokenizer_args.vocab_size=600",
            "run.node_array_size=1",
            "run.workers_per_node=2",
        )
    )
    train_tokenizer.main(["--config", config])
    assert model.is_file() and (model.parent / "merges.txt").is_file()
    preprocess.main(["--config", config])
    tokenizer = load_tokenizer(TokenizerSpec("huggingface", model=str(model)))
    assert tokenizer._cached is not None  # a GPT-2-style pipeline: the segment cache applies
    reference_dataset(files[0], str(tmp_path / "ref"), tokenizer)
    out = tmp_path / "data" / "custom_dataset" / "preprocessed" / "big_text_document"
    assert same_files(str(out) + ".bin", tmp_path / "ref.bin")
    assert same_files(str(out) + ".idx", tmp_path / "ref.idx")


def test_extract_reports_a_corrupt_download_and_overwrites_a_stale_partial(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    config = str(resolved("gpt3/tiny_pile", tmp_path, "progress=false", "file_numbers=0"))
    download.main(["--config", config])
    raw = tmp_path / "data" / "tiny_pile" / "raw" / "00.jsonl.zst"
    extracted = tmp_path / "data" / "tiny_pile" / "extracted" / "00.jsonl"
    good = raw.read_bytes()
    raw.write_bytes(b"this is not zstd")
    with pytest.raises(extract.DataPrepError, match="00.jsonl.zst: not a valid zstd file"):
        extract.main(["--config", config])
    assert not extracted.exists()
    raw.write_bytes(good)
    extracted.parent.mkdir(parents=True, exist_ok=True)
    (extracted.parent / "00.jsonl.tmp").write_bytes(b"partial output of a killed run")
    extract.main(["--config", config])
    assert extracted.read_bytes().count(b"\n") == 67
    assert sorted(p.name for p in extracted.parent.iterdir()) == ["00.jsonl"]
