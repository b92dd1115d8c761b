"""The tiny T5 pipeline on a real Slurm, with default paths only: data preparation (array jobs and the tokenizer
job), training on two (fake) nodes, conversion to megatron_t5.nemo, fine-tuning on the generated SQuAD-format
questions and the evaluation of the tuned model: the T5 quick start's pipeline, submitted with dependencies."""

import json


def test_tiny_t5_pipeline_on_two_nodes(t5_slurm_pipeline):
    """The session's run (tests/launch/slurm_pipelines.py), which tests/launch/test_prompt_pipeline_on_slurm.py
    prompt-tunes further."""
    assert t5_slurm_pipeline.stages == ["data_preparation"] * 4 + [
        "training",
        "conversion",
        "fine_tuning",
        "evaluation",
    ]
    ids = t5_slurm_pipeline.ids
    assert t5_slurm_pipeline.states == ["COMPLETED"] * 4, t5_slurm_pipeline.states

    train_dir = t5_slurm_pipeline.results / "t5_tiny"
    (log,) = train_dir.glob(f"log-*t5_tiny_{ids[4]}_attempt0.out")
    assert "step=10/10" in log.read_text()
    assert (train_dir / "results" / "checkpoints" / "step-10" / "COMPLETE").exists()
    assert (train_dir / "convert_nemo" / "results" / "megatron_t5.nemo").exists()
    assert (train_dir / "squad" / "results" / "checkpoints" / "megatron_t5_squad.nemo").exists()
    scores = json.loads((train_dir / "squad_eval" / "results" / "qa_metrics.json").read_text())
    assert scores["squad"]["examples"] == 64 and 0.0 <= scores["squad"]["exact_match"] <= 100.0
