"""The data preparation stage: array jobs per shard chained with aftercorr, switches, and real runs."""

import subprocess
from pathlib import Path

import pytest

from .conftest import plan_rows
from .test_golden import FIXED, GOLDEN


def _scripts(results: Path):
    return {p.parent.name: p.read_text() for p in sorted(results.rglob("*_submission.sh"))}


def test_pile_steps_are_arrays_chained_per_shard(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        FIXED + ["stages=[data_preparation,training]", "data_preparation=gpt3/download_gpt3_pile"], results=results
    )
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[1] for row in rows] == [
        "nemo-megatron-download_gpt3_pile_download",
        "nemo-megatron-download_gpt3_pile_extract",
        "nemo-megatron-download_gpt3_pile_preprocess",
        "nemo-megatron-gpt3_5b",
    ]
    assert [row[3] for row in rows] == [
        "singleton",
        "aftercorr:DRYRUN-1,singleton",
        "aftercorr:DRYRUN-2,singleton",
        "afterok:DRYRUN-3,singleton",
    ]
    scripts = _scripts(results)
    for step in ("download", "extract", "preprocess"):
        assert "#SBATCH --array=0-29%30\n" in scripts[step] and "#SBATCH --nodes=1\n" in scripts[step]
        assert "gpus-per-node" not in scripts[step]
        assert f"-m nemo_launcher.jobs.data.{step} --config " in scripts[step]
        subprocess.run(["bash", "-n", "-c", scripts[step]], check=True)
    text = scripts["preprocess"].replace(str(results), "<BRD>")
    golden = GOLDEN / "download_gpt3_pile_preprocess_bcm.sh"
    import os

    if os.environ.get("NEMO_LAUNCHER_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "refresh with NEMO_LAUNCHER_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize(
    "overrides,steps,array",
    [
        (["data_preparation.file_numbers='0,3,5-7'"], ["download", "extract", "preprocess"], "0,3,5-7%30"),
        (["data_preparation.download_the_pile=false"], ["preprocess"], "0-29%30"),
        (
            ["data_preparation.preprocess_data=false", "data_preparation.run.node_array_size=4"],
            ["download", "extract"],
            "0-29%4",
        ),
    ],
)
def test_switches_and_shard_selection(overrides, steps, array, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", *overrides], results=results
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert sorted(scripts) == sorted(steps)
    assert all(f"#SBATCH --array={array}\n" in text for text in scripts.values())


def test_custom_dataset_trains_tokenizer_then_preprocesses_over_nodes(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=generic/custom_dataset",
            "data_preparation.raw_dataset_files=[/data/a.jsonl,/data/b.jsonl]",
        ],
        results=results,
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert "--array" not in scripts["train_tokenizer"]
    assert (
        "#SBATCH --array=0-3%4\n" in scripts["preprocess"] and "#SBATCH --cpus-per-task=256\n" in scripts["preprocess"]
    )
    assert "afterok:DRYRUN-1,singleton" in out


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["data_preparation.file_numbers='3-1'"], ["data_preparation.file_numbers", "3-1", "ends before it starts"]),
        (["data_preparation.file_numbers=abc"], ["data_preparation.file_numbers", "abc"]),
        (["data_preparation.download_the_pile=false", "data_preparation.preprocess_data=false"], ["switched off"]),
    ],
)
def test_bad_data_preparation_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(
        ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", *overrides], results=tmp_path / "r"
    )
    assert code == 2, err
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_bcp_deals_shards_over_replicas_with_mpirun(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", "cluster_type=bcp"], results=results
    )
    assert code == 0, err
    scripts = _scripts(results)
    assert "bcprun --nnodes 30 --npernode 2 --launcher 'mpirun --allow-run-as-root'" in scripts["preprocess"]
    assert "bcprun --nnodes 30 --npernode 1 --launcher" in scripts["download"]


def _wait_for_arrays(job_ids, timeout_s):
    """`scontrol show job <array id>` reports one task; an array is done when squeue lists none of its tasks."""
    import time

    deadline = time.monotonic() + timeout_s
    while subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            pytest.fail(f"array jobs {job_ids} still queued after {timeout_s} s")
        time.sleep(0.5)


def test_tiny_pile_on_real_slurm(slurm_cluster, launch, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=gpt3/tiny_pile",
            f"data_dir={data}",
            "cluster.gpus_per_node=null",
            "cluster.exclusive=false",
        ],
        debug=False,
        results=results,
    )
    assert code == 0, err
    ids = [row[2] for row in plan_rows(out)]
    assert len(ids) == 3
    _wait_for_arrays(ids, timeout_s=240)
    states = "".join(
        subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        for job_id in ids
    )
    assert states.count("JobState=COMPLETED") == 9, states  # 3 steps x 3 shards
    produced = sorted(p.name for p in (data / "tiny_pile" / "preprocessed").glob("*.idx"))
    assert produced == [f"tiny_pile_0{i}_text_document.idx" for i in range(3)]
    # One log per array task and attempt.
    assert len(list((results / "tiny_pile" / "preprocess").glob("log-*_attempt0.out"))) == 3


# ---- T5, BERT and mT5 ----------------------------------------------------------------------------------------
def _plan(launch, tmp_path, *overrides):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", *overrides], results=results)
    assert code == 0, err
    return plan_rows(out), _scripts(results), results


@pytest.mark.parametrize(
    "choice, name, tokenizer",
    [
        ("t5/download_t5_pile", "download_t5_pile", "BertWordPieceCase"),
        ("bert/download_bert_pile", "download_bert_pile", "BertWordPieceLowerCase"),
    ],
)
def test_t5_and_bert_pile_are_the_gpt_arrays_with_wordpiece_sentences(choice, name, tokenizer, launch, tmp_path):
    import yaml

    rows, scripts, results = _plan(launch, tmp_path, f"data_preparation={choice}", *FIXED)
    assert [row[1] for row in rows] == [
        f"nemo-megatron-{name}_{step}" for step in ("download", "extract", "preprocess")
    ]
    assert all("#SBATCH --array=0-29%30\n" in text for text in scripts.values())
    config = yaml.safe_load((results / name / f"{name}_hydra.yaml").read_text())
    assert (config["tokenizer_type"], config["vocab_file"], config["merge_file"]) == (
        tokenizer,
        "/data/bpe/vocab.txt",
        None,
    )
    assert (
        config["download_vocab_url"] == "https://s3.amazonaws.com/models.huggingface.co/bert/bert-large-cased-vocab.txt"
    )
    assert config["split_sentences"] is True and config["append_eod"] is False


def test_tiny_t5_trains_its_vocabulary_between_extract_and_preprocess(launch, tmp_path):
    rows, scripts, _ = _plan(launch, tmp_path, "data_preparation=t5/tiny_pile")
    assert [row[1].rsplit("_", 1)[-1] for row in rows] == ["download", "extract", "tokenizer", "preprocess"]
    # Per shard between arrays; the single job waits for the whole extract array and preprocess for it.
    assert [row[3] for row in rows] == [
        "singleton",
        "aftercorr:DRYRUN-1,singleton",
        "afterok:DRYRUN-2,singleton",
        "afterok:DRYRUN-3,singleton",
    ]
    assert "--array" not in scripts["train_tokenizer"] and "#SBATCH --array=0-2%3\n" in scripts["preprocess"]


def test_mc4_steps_come_from_the_schema(launch, tmp_path):
    rows, scripts, _ = _plan(launch, tmp_path, "data_preparation=mt5/download_mc4")
    assert [row[1] for row in rows] == [
        f"nemo-megatron-download_mc4_{step}" for step in ("prepare", "download", "setup_preprocess", "preprocess")
    ]
    assert [row[3] for row in rows] == [
        "singleton",
        "afterok:DRYRUN-1,singleton",
        "afterok:DRYRUN-2,singleton",
        "afterok:DRYRUN-3,singleton",
    ]
    assert "--array" not in scripts["prepare"] and "--array" not in scripts["setup_preprocess"]
    assert "#SBATCH --array=0-19%20\n" in scripts["download"] and "#SBATCH --ntasks-per-node=1\n" in scripts["download"]
    # preprocess: workers_per_node tasks per node, cpus_per_node / workers_per_node CPUs each, every task runs it.
    preprocess = scripts["preprocess"]
    assert "#SBATCH --array=0-19%20\n" in preprocess and "#SBATCH --ntasks-per-node=4\n" in preprocess
    assert "#SBATCH --cpus-per-task=64\n" in preprocess and "--ntasks=1" not in preprocess
    assert "-m nemo_launcher.jobs.data.preprocess --config " in preprocess
    rows, scripts, _ = _plan(
        launch,
        tmp_path / "w",
        "data_preparation=mt5/download_mc4",
        "data_preparation.run.workers_per_node=8",
        "data_preparation.download_mc4=false",
    )
    assert [row[1].split("download_mc4_")[1] for row in rows] == ["setup_preprocess", "preprocess"]
    assert (
        "#SBATCH --ntasks-per-node=8\n" in scripts["preprocess"]
        and "#SBATCH --cpus-per-task=32\n" in scripts["preprocess"]
    )


def test_mc4_on_bcp_runs_workers_per_node_processes_per_node(launch, tmp_path):
    _, scripts, _ = _plan(launch, tmp_path, "data_preparation=mt5/download_mc4", "cluster_type=bcp")
    assert "bcprun --nnodes 20 --npernode 4 --launcher 'mpirun --allow-run-as-root'" in scripts["preprocess"]
    assert "bcprun --nnodes 20 --npernode 1 --launcher" in scripts["download"]
    assert "bcprun --nnodes 1 --npernode 1 --env" in scripts["prepare"]


@pytest.mark.parametrize(
    "overrides,words",
    [
        (
            ["data_preparation=mt5/download_mc4", "data_preparation.languages='de,x1'"],
            ["data_preparation.languages", "'x1' is not an mC4 language code"],
        ),
        (["data_preparation=mt5/download_mc4", "data_preparation.languages='all,de'"], ["all selects every language"]),
        (
            ["data_preparation=mt5/download_mc4", "data_preparation.run.cpus_per_node=2"],
            ["data_preparation.run.cpus_per_node=2", "workers_per_node=4"],
        ),
        (
            ["data_preparation=mt5/download_mc4", "data_preparation.run.workers_per_node=null"],
            ["data_preparation.run.workers_per_node", "set it"],
        ),
        (
            ["data_preparation=mt5/download_mc4", "data_preparation.max_split_size=0"],
            ["data_preparation.max_split_size"],
        ),
        (
            ["data_preparation=mt5/tiny_mc4", "data_preparation.download_tokenizer_url=file:///x.model"],
            ["download_tokenizer_url", "train_tokenizer writes"],
        ),
        (
            ["data_preparation=gpt3/download_gpt3_pile", "data_preparation.train_tokenizer=true"],
            ["data_preparation.train_tokenizer", "GPT2BPETokenizer is downloaded"],
        ),
        (
            ["data_preparation=t5/tiny_pile", "data_preparation.download_vocab_url=https://x/vocab.txt"],
            ["data_preparation.download_vocab_url", "train_tokenizer writes vocab_file"],
        ),
        (
            ["data_preparation=t5/download_t5_pile", "data_preparation.tokenizer_type=BertWordPiece"],
            ["data_preparation.tokenizer_type", "nearest: BertWordPieceCase"],
        ),
        (
            ["data_preparation=t5/download_t5_pile", "data_preparation.vocab_file=null"],
            ["data_preparation.vocab_file", "tokenizer_type BertWordPieceCase needs this file"],
        ),
        (
            ["data_preparation=t5/download_t5_pile", "data_preparation.max_sentence_tokens=0"],
            ["data_preparation.max_sentence_tokens=0"],
        ),
    ],
)
def test_bad_t5_bert_mt5_configs_are_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(["stages=[data_preparation]", *overrides], results=tmp_path / "r")
    assert code == 2, err
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_tiny_mc4_on_real_slurm(slurm_cluster, launch, tmp_path):
    """prepare -> download (2 array tasks) -> setup_preprocess -> train_tokenizer -> preprocess (2 array tasks of 2
    processes each, one worker slot per process)."""
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        [
            "stages=[data_preparation]",
            "data_preparation=mt5/tiny_mc4",
            f"data_dir={data}",
            "data_preparation.progress=false",
            "cluster.gpus_per_node=null",
            "cluster.exclusive=false",
        ],
        debug=False,
        results=results,
    )
    assert code == 0, err
    ids = [row[2] for row in plan_rows(out)]
    assert len(ids) == 5
    _wait_for_arrays(ids, timeout_s=300)
    states = "".join(
        subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        for job_id in ids
    )
    assert states.count("JobState=COMPLETED") == 7, states  # 3 single jobs + 2 x 2 array tasks
    produced = sorted(
        p.relative_to(data / "tiny_mc4" / "preprocessed").as_posix()
        for p in (data / "tiny_mc4" / "preprocessed").rglob("*_sentence.idx")
    )
    assert produced == [
        f"{lang}/{lang}_00{n}_text_sentence.idx" for lang in ("de", "en", "fr", "ja", "ru", "zh") for n in (0, 1)
    ]
    # Each preprocess process built exactly the splits of its worker slot (SLURM_LOCALID within its array task).
    logs = "".join(path.read_text() for path in (results / "tiny_mc4" / "preprocess").glob("log-*.out"))
    import json

    mapping = json.loads((data / "tiny_mc4" / "preprocess_mapping").read_text())
    for worker, splits in mapping["workers"].items():
        for split in splits:
            assert f"worker {worker}: split {split} " in logs, (worker, split)
