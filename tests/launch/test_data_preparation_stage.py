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
    code, out, err = launch(FIXED + ["stages=[data_preparation,training]", "data_preparation=gpt3/download_gpt3_pile"], results=results)
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[1] for row in rows] == [
        "nemo-megatron-download_gpt3_pile_download", "nemo-megatron-download_gpt3_pile_extract",
        "nemo-megatron-download_gpt3_pile_preprocess", "nemo-megatron-gpt3_5b",
    ]
    assert [row[3] for row in rows] == ["singleton", "aftercorr:DRYRUN-1,singleton", "aftercorr:DRYRUN-2,singleton", "afterok:DRYRUN-3,singleton"]
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


@pytest.mark.parametrize("overrides,steps,array", [
    (["data_preparation.file_numbers='0,3,5-7'"], ["download", "extract", "preprocess"], "0,3,5-7%30"),
    (["data_preparation.download_the_pile=false"], ["preprocess"], "0-29%30"),
    (["data_preparation.preprocess_data=false", "data_preparation.run.node_array_size=4"], ["download", "extract"], "0-29%4"),
])
def test_switches_and_shard_selection(overrides, steps, array, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", *overrides], results=results)
    assert code == 0, err
    scripts = _scripts(results)
    assert sorted(scripts) == sorted(steps)
    assert all(f"#SBATCH --array={array}\n" in text for text in scripts.values())


def test_custom_dataset_trains_tokenizer_then_preprocesses_over_nodes(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=generic/custom_dataset",
                             "data_preparation.raw_dataset_files=[/data/a.jsonl,/data/b.jsonl]"], results=results)
    assert code == 0, err
    scripts = _scripts(results)
    assert "--array" not in scripts["train_tokenizer"]
    assert "#SBATCH --array=0-3%4\n" in scripts["preprocess"] and "#SBATCH --cpus-per-task=256\n" in scripts["preprocess"]
    assert "afterok:DRYRUN-1,singleton" in out


@pytest.mark.parametrize("overrides,words", [
    (["data_preparation.file_numbers='3-1'"], ["data_preparation.file_numbers", "3-1", "ends before it starts"]),
    (["data_preparation.file_numbers=abc"], ["data_preparation.file_numbers", "abc"]),
    (["data_preparation.download_the_pile=false", "data_preparation.preprocess_data=false"], ["switched off"]),
])
def test_bad_data_preparation_config_is_refused(overrides, words, launch, tmp_path):
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", *overrides], results=tmp_path / "r")
    assert code == 2, err
    assert all(word in err for word in words), err
    assert not (tmp_path / "r").exists()


def test_bcp_deals_shards_over_replicas_with_mpirun(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile", "cluster_type=bcp"], results=results)
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
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=gpt3/tiny_pile", f"data_dir={data}",
                             "cluster.gpus_per_node=null", "cluster.exclusive=false"], debug=False, results=results)
    assert code == 0, err
    ids = [row[2] for row in plan_rows(out)]
    assert len(ids) == 3
    _wait_for_arrays(ids, timeout_s=240)
    states = "".join(subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout for job_id in ids)
    assert states.count("JobState=COMPLETED") == 9, states  # 3 steps x 3 shards
    produced = sorted(p.name for p in (data / "tiny_pile" / "preprocessed").glob("*.idx"))
    assert produced == [f"tiny_pile_0{i}_text_document.idx" for i in range(3)]
    # One log per array task and attempt.
    assert len(list((results / "tiny_pile" / "preprocess").glob("log-*_attempt0.out"))) == 3
