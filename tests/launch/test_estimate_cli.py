"""`python3 -m nemo_launcher estimate ...` as a user types it: the prediction for each training job, written
nowhere, and the cluster's GPU settings checked as main.py checks them.

    python3 -m pytest tests/launch/test_estimate_cli.py
"""

import json
import os
import subprocess
import sys

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT


def estimate(*words: str, results) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    env.pop("NEMO_LAUNCHER_FULL_ERROR", None)
    argv = [sys.executable, "-m", "nemo_launcher", "estimate", *words, f"base_results_dir={results}"]
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_json_gives_one_object_per_training_like_job_and_writes_nothing(tmp_path):
    results = tmp_path / "results"
    done = estimate(
        "stages=[training,conversion,fine_tuning]",
        "training=gpt3/5b",
        "fine_tuning=gpt3/squad",
        "cluster.gpu_hour_price=2.5",
        "--json",
        results=results,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    line, fine_tuning_line = done.stdout.splitlines()  # the conversion trains nothing
    record = json.loads(line)
    assert record["job"] == "gpt3_5b"
    assert record["parameters"] == 5_047_558_144  # tests/contract/test_performance_estimate.py counts it by hand
    assert record["gpu_type"] == "a100-80gb" and record["gpu_memory_gib"] == 80.0
    assert record["gpus"] == 128 and record["train_steps"] == 75000
    assert record["cost"] == pytest.approx(record["gpu_hours"] * 2.5, rel=1e-3)
    assert not results.exists(), "estimate must not create the results folder"
    # the fine-tuning starts from the model the pipeline trains, at its own batch and parallelism
    fine_tuning = json.loads(fine_tuning_line)
    assert fine_tuning["job"] == "squad_gpt3_5b" and fine_tuning["parameters"] == record["parameters"]
    assert fine_tuning["gpus"] == 8 and fine_tuning["layout"]["gbs"] == 32


def test_the_table_shows_a_job_that_will_not_fit_with_its_breakdown_and_fix(tmp_path):
    done = estimate(
        "stages=[training]",
        "training=gpt3/20b",
        "training.model.tensor_model_parallel_size=1",
        "training.model.optim.name=fused_adam",
        "cluster.gpu_type=h100-80gb",
        results=tmp_path / "results",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["job", "gpus", "parameters", "memory/GPU"]
    assert lines[1].startswith("gpt3_20b") and "512 x h100-80gb" in lines[1]
    assert "gpt3_20b does not fit in GPU memory:" in lines
    assert any(line.startswith("  weights, gradients and optimizer state: ") for line in lines)
    assert any(line.startswith("  fix: ") and "model.optim.name=distributed_fused_adam" in line for line in lines)


def test_an_unknown_gpu_type_is_refused_in_one_line(tmp_path):
    done = estimate("stages=[training]", "training=gpt3/5b", "cluster.gpu_type=a100-90gb", results=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "Error: cluster.gpu_type='a100-90gb': use one of a100-40gb, a100-80gb, h100-80gb, h200-141gb\n"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("cluster.gpu_type=v100", "cluster.gpu_type='v100': use one of a100-40gb"),
        ("cluster.gpu_hour_price=-1", "cluster.gpu_hour_price=-1: use the price of one GPU-hour"),
    ],
)
def test_main_py_refuses_a_bad_gpu_setting_before_writing(launch, tmp_path, override, message):
    code, out, err = launch(["stages=[training]", "training=gpt3/5b", override], results=tmp_path / "results")
    assert code == 2
    assert err == f"Error: {message}" + err.split(message, 1)[1]
    assert not (tmp_path / "results").exists()
