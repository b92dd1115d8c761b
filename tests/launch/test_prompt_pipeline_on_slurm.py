"""The prompt-learning quick starts' pipelines (GPT and T5) on a real Slurm with default paths only: data preparation
(array jobs), training, conversion to megatron_gpt.nemo / megatron_t5.nemo, p-tuning of the frozen .nemo on
generated SQuAD-format questions and the evaluation of its answers, each job waiting for the one before."""

import json

import pytest

from .conftest import plan_rows
from .test_data_preparation_stage import _wait_for_arrays
from .test_training_on_slurm import SLURM_CPU


@pytest.mark.parametrize(
    "config, train_name, family", [("quickstart_prompt", "gpt3_tiny", "gpt"), ("quickstart_t5_prompt", "t5_tiny", "t5")]
)
def test_tiny_prompt_learning_pipeline(config, train_name, family, slurm_cluster, launch, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        [
            "cluster_type=bcm",
            f"data_dir={data}",
            "training.trainer.max_steps=10",
            "training.exp_manager.checkpoint_callback_params.every_n_train_steps=5",
            "prompt_learning.trainer.max_steps=8",
            *SLURM_CPU,
        ],
        debug=False,
        results=results,
        config_name=config,
    )
    assert code == 0, err
    rows = plan_rows(out)
    stages = [row[0] for row in rows]
    assert stages[-4:] == ["training", "conversion", "prompt_learning", "evaluation"], stages
    ids = [row[2] for row in rows]
    _wait_for_arrays(ids[:-4], timeout_s=300)
    states = [slurm_cluster.wait(job_id, timeout_s=600) for job_id in ids[-4:]]
    assert states == ["COMPLETED"] * 4, states
    train = results / train_name
    assert (train / "prompt_learning_squad" / "results" / f"megatron_{family}_prompt.nemo").exists()
    scores = json.loads((train / "eval_prompt_squad" / "results" / "qa_metrics.json").read_text())
    assert scores["squad_test"]["examples"] == 32 and 0.0 <= scores["squad_test"]["exact_match"] <= 100.0
