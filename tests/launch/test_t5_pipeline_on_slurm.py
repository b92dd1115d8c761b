"""The tiny T5 pipeline on a real Slurm, with default paths only: data preparation (array jobs and the tokenizer
job), training on two (fake) nodes, conversion to megatron_t5.nemo, fine-tuning on the generated SQuAD-format
questions and the evaluation of the tuned model: the T5 quick start's pipeline, submitted with dependencies."""

import json

from .conftest import plan_rows
from .test_data_preparation_stage import _wait_for_arrays
from .test_training_on_slurm import SLURM_CPU

# The quick start tunes 300 steps to answer well (tests/test_quickstart.py checks its scores); here the pipeline's
# wiring is under test, and 20 steps still write the tuned .nemo the evaluation reads.
SHORT_FINE_TUNING = [
    "fine_tuning.trainer.max_steps=20",
    "fine_tuning.trainer.val_check_interval=20",
    "fine_tuning.trainer.log_every_n_steps=10",
    "fine_tuning.exp_manager.checkpoint_callback_params.every_n_train_steps=20",
]


def test_tiny_t5_pipeline_on_two_nodes(slurm_cluster, launch, tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    code, out, err = launch(
        [
            "cluster_type=bcm",
            f"data_dir={data}",
            "training.trainer.num_nodes=2",
            "training.trainer.max_steps=10",
            "training.exp_manager.checkpoint_callback_params.every_n_train_steps=5",
            *SHORT_FINE_TUNING,
            *SLURM_CPU,
        ],
        debug=False,
        results=results,
        config_name="quickstart_t5",
    )
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[0] for row in rows] == ["data_preparation"] * 4 + [
        "training",
        "conversion",
        "fine_tuning",
        "evaluation",
    ]
    ids = [row[2] for row in rows]
    _wait_for_arrays(ids[:4], timeout_s=300)
    states = [slurm_cluster.wait(job_id, timeout_s=600) for job_id in ids[4:]]
    assert states == ["COMPLETED"] * 4, states

    train_dir = results / "t5_tiny"
    (log,) = train_dir.glob(f"log-*t5_tiny_{ids[4]}_attempt0.out")
    assert "step=10/10" in log.read_text()
    assert (train_dir / "results" / "checkpoints" / "step-10" / "COMPLETE").exists()
    assert (train_dir / "convert_nemo" / "results" / "megatron_t5.nemo").exists()
    assert (train_dir / "squad" / "results" / "checkpoints" / "megatron_t5_squad.nemo").exists()
    scores = json.loads((train_dir / "squad_eval" / "results" / "qa_metrics.json").read_text())
    assert scores["squad"]["examples"] == 64 and 0.0 <= scores["squad"]["exact_match"] <= 100.0
