"""The prompt-learning quick starts' last stages (GPT and T5) on a real Slurm with default paths only: p-tuning of the
frozen megatron_gpt.nemo / megatron_t5.nemo on generated SQuAD-format questions and the evaluation of its answers,
the evaluation job waiting for the tuning job.

They start, as a user would after pre-training, from the .nemo that the session's Slurm pipeline wrote
(conftest.py's gpt_slurm_pipeline / t5_slurm_pipeline: data preparation, 10 training steps, conversion), launching
`--config-name=quickstart_prompt` (quickstart_t5_prompt) with stages=[prompt_learning,evaluation] and the same
base_results_dir and data_dir: the data -> training -> conversion chain on Slurm is the pipeline tests' to check
(test_training_on_slurm.py, test_t5_pipeline_on_slurm.py), and the prompt quick start as printed runs whole in
tests/test_quickstart_prompt.py."""

import json

import pytest

from .slurm_pipelines import submit_and_wait


@pytest.mark.parametrize(
    "config, pipeline, train_name, family, examples",
    [
        ("quickstart_prompt", "gpt_slurm_pipeline", "gpt3_tiny", "gpt", 32),
        # The T5 pipeline's fine-tuning wrote dev-v1.1.json with its 64 generated questions; the prompt quick start
        # keeps a SQuAD file that exists (it writes its own 32 only where none is), as for a user's real SQuAD.
        ("quickstart_t5_prompt", "t5_slurm_pipeline", "t5_tiny", "t5", 64),
    ],
)
def test_tiny_prompt_learning_pipeline(config, pipeline, train_name, family, examples, slurm_cluster, request):
    pretrained = request.getfixturevalue(pipeline)
    assert pretrained.states == ["COMPLETED"] * len(pretrained.states), pretrained.states
    train = pretrained.results / train_name
    assert (train / "convert_nemo" / "results" / f"megatron_{family}.nemo").exists()
    tuned = submit_and_wait(
        slurm_cluster,
        ["stages=[prompt_learning,evaluation]", "prompt_learning.trainer.max_steps=8"],
        pretrained.results,
        pretrained.data,
        config_name=config,
    )
    assert tuned.stages == ["prompt_learning", "evaluation"], tuned.stages
    assert f"afterok:{tuned.ids[0]}" in tuned.rows[1][3].split(","), tuned.rows  # the evaluation waits for it
    assert tuned.states == ["COMPLETED"] * 2, tuned.states
    assert (train / "prompt_learning_squad" / "results" / f"megatron_{family}_prompt.nemo").exists()
    scores = json.loads((train / "eval_prompt_squad" / "results" / "qa_metrics.json").read_text())
    assert scores["squad_test"]["examples"] == examples and 0.0 <= scores["squad_test"]["exact_match"] <= 100.0
