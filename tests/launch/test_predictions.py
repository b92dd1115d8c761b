"""The plan predicts (issue 24, deliverable 2): every training-like job's memory per GPU, step time, tokens/s, MFU,
time and GPU-hours in the dry run and the submission plan; the ledger keeps them; `status` sets the predicted step
time beside the one the job measured; a job predicted not to fit in its GPUs' memory is refused at launch, with
the breakdown and a fix, unless memory_check=false."""

import json
from pathlib import Path

import pytest

from nemo_launcher.contract.measured_steps import write_measured_steps

from .test_ledger import _run, fake_slurm  # noqa: F401  (fake_slurm is a fixture)

GPT_5B = ["stages=[training]", "training=gpt3/5b"]


def _predicted_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Predicted on "))
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    return block


def test_the_dry_run_plan_predicts_the_training_job(launch):
    code, out, err = launch(GPT_5B)
    assert code == 0, err
    header, line = _predicted_lines(out)
    assert header.startswith("Predicted on a100-80gb")
    assert line.startswith("  training gpt3_5b: 5.05B parameters, memory/GPU ")
    for words in (
        "of 80 GiB (weights+optimizer ",
        "activations ",
        " s, ",
        " tokens/s, MFU ",
        "days to train",
        "GPU-hours",
    ):
        assert words in line, line
    assert "DOES NOT FIT" not in line and "$" not in line


def test_gpu_type_and_price_change_the_prediction(launch):
    code, out, err = launch(GPT_5B + ["cluster.gpu_type=h100-80gb", "cluster.gpu_hour_price=2.5"])
    assert code == 0, err
    header, line = _predicted_lines(out)
    assert header.startswith("Predicted on h100-80gb") and " GPU-hours ($" in line, line


def test_a_job_predicted_not_to_fit_is_refused_before_anything_is_written(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(GPT_5B + ["training.model.micro_batch_size=16"], debug=False, results=results)
    assert code == 2 and not out
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: training: predicted ") and "GiB per GPU does not fit the 80 GiB of " in line
    assert "cluster.gpu_type=a100-80gb" in line and "activations: " in line and "micro batch 16" in line
    assert "set model.activations_checkpoint_granularity=full" in line, line  # a change the model says fits
    assert line.endswith("or set memory_check=false to submit it anyway")
    assert not results.exists()


def test_memory_check_false_submits_it_and_the_plan_says_it_does_not_fit(launch):
    code, out, err = launch(GPT_5B + ["training.model.micro_batch_size=16", "memory_check=false"])
    assert code == 0, err
    assert "(DOES NOT FIT)" in _predicted_lines(out)[1]


def test_a_cpu_training_gets_no_gpu_prediction(launch):
    code, out, err = launch(["stages=[training]", "training=gpt3/tiny"])
    assert code == 0, err
    assert "Predicted on" not in out


def test_fine_tuning_is_predicted_as_a_training_of_the_model_it_loads(launch):
    tuning = ["stages=[fine_tuning]", "fine_tuning=gpt3/squad", "check_inputs=false"]
    code, out, err = launch(tuning + ["training=gpt3/126m"])
    assert code == 0, err
    assert _predicted_lines(out)[1].startswith("  fine_tuning squad_gpt3_126m: 125M parameters, memory/GPU ")
    # The run it follows by default is gpt3/5b's: every weight with plain Adam on TP 1 is 18 bytes a parameter.
    code, out, err = launch(tuning)
    assert code == 2, out
    assert "Error: fine_tuning: predicted " in err and "optimizer not distributed" in err
    assert "raise model.tensor_model_parallel_size to 2" in err


def test_lora_counts_the_frozen_base_at_two_bytes_a_weight(launch):
    code, out, err = launch(["stages=[peft]", "peft=gpt3/squad", "check_inputs=false"])
    assert code == 0, err
    line = _predicted_lines(out)[1]
    # 5.05B weights x 2 bytes = 9.4 GiB: no gradients and no optimizer state for them.
    assert line.startswith("  peft squad_gpt3_5b: 5.05B parameters, ") and "(weights+optimizer 9.4, " in line, line


def test_prompt_learning_gets_no_prediction(launch):
    code, out, err = launch(["stages=[prompt_learning]", "prompt_learning=gpt3/squad", "check_inputs=false"])
    assert code == 0, err
    assert "Predicted on" not in out


def test_a_node_count_set_when_the_job_starts_leaves_nothing_to_predict(launch):
    code, out, err = launch(
        ["stages=[training]", "training=gpt3/40b", "cluster_type=bcp", "training.trainer.num_nodes=$NGC_ARRAY_SIZE"]
    )
    assert code == 0, err
    assert "Predicted on" not in out


@pytest.fixture
def submitted_5b(fake_slurm, launch, tmp_path):  # noqa: F811  (the imported fixture)
    """gpt3/5b submitted for real to a stand-in sbatch: (results, ledger record)."""
    fake_slurm(squeue="echo '1001|RUNNING|2:03:04|None'")
    results = tmp_path / "results"
    code, out, err = launch(GPT_5B + ["check_inputs=false"], debug=False, results=results)
    assert code == 0, err
    assert _predicted_lines(out)[1].startswith("  training gpt3_5b: ")
    (path,) = (results / ".ledger").glob("*.json")
    return results, json.loads(path.read_text())


def test_the_ledger_keeps_the_prediction_and_status_compares_it_with_the_measured_step(submitted_5b, capsys):
    results, record = submitted_5b
    (job,) = record["jobs"]
    prediction = job["prediction"]
    assert prediction["job"] == "gpt3_5b" and prediction["gpu_type"] == "a100-80gb" and prediction["fits"]
    assert job["measured_steps_dir"] == str(results / "gpt3_5b" / "results")
    predicted = prediction["step_time_s"]

    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    header, row = out.splitlines()[1:3]
    assert "step predicted/measured" in header
    assert f"{predicted:.3g} s / -" in row  # nothing logged yet

    Path(job["measured_steps_dir"]).mkdir(parents=True)  # as the job makes it
    write_measured_steps(job["measured_steps_dir"], {"step": 10, "max_steps": 100, "step_time_s": predicted * 1.25})
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert f"{predicted:.3g} s / {predicted * 1.25:.3g} s (+25%)" in out.splitlines()[2]


def test_status_of_a_pipeline_without_predictions_has_no_step_column(fake_slurm, launch, tmp_path, capsys):  # noqa: F811
    fake_slurm(squeue="echo '1001|RUNNING|0:04|None'")
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", "training=gpt3/tiny"], debug=False, results=results)
    assert code == 0, err
    (path,) = (results / ".ledger").glob("*.json")
    code, out, err = _run(capsys, "status", path.stem, "--results", results)
    assert code == 0, err
    assert "predicted" not in out
