"""The tiny GPT and T5 pre-training pipelines on the real Slurm, submitted once per session (conftest.py's
`gpt_slurm_pipeline` and `t5_slurm_pipeline`): data preparation, training on two (fake) nodes and conversion to a
.nemo take most of a Slurm test's minutes, and the pipeline tests and the prompt-learning tests need the same ones.
The pipeline tests assert on what these runs wrote; the prompt-learning tests submit their stages on top of it.

Every Slurm test runs on one xdist worker (tests/conftest.py, the `slurm` unit), so each pipeline is built once."""

import contextlib
import dataclasses
import io
import subprocess
from pathlib import Path

import pytest

from .conftest import plan_rows, run_launcher
from .test_data_preparation_stage import _wait_for_arrays
from .test_training_on_slurm import SLURM_CPU

# Both pre-train 10 steps, saving at 5 and 10, on two nodes.
TINY_TRAINING = [
    "training.trainer.num_nodes=2",
    "training.trainer.max_steps=10",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=5",
]

# data_preparation -> training -> conversion -> evaluation -> export of the GPT quick start's model.
GPT_PIPELINE = [
    "stages=[data_preparation,training,conversion,evaluation,export]",
    "data_preparation=gpt3/tiny_pile",
    "training=gpt3/tiny",
    "evaluation=gpt3/evaluate_lambada",
    "evaluation.run.prepare_sample_data=true",
]

# The quick start tunes 300 steps to answer well (tests/test_quickstart.py checks its scores); here the pipeline's
# wiring is under test, and 20 steps still write the tuned .nemo the evaluation reads.
SHORT_FINE_TUNING = [
    "fine_tuning.trainer.max_steps=20",
    "fine_tuning.trainer.val_check_interval=20",
    "fine_tuning.trainer.log_every_n_steps=10",
    "fine_tuning.exp_manager.checkpoint_callback_params.every_n_train_steps=20",
]


@dataclasses.dataclass(frozen=True)
class SlurmRun:
    """A submission to the real Slurm whose jobs have all ended."""

    results: Path  # base_results_dir
    data: Path  # data_dir
    out: str  # what the launcher printed (the plan table)
    rows: list  # plan_rows(out)
    states: list  # the final Slurm state of each job after data preparation, in plan order

    @property
    def stages(self) -> list:
        return [row[0] for row in self.rows]

    @property
    def ids(self) -> list:
        return [row[2] for row in self.rows]


def submit_and_wait(cluster, overrides: list, results: Path, data: Path, config_name: str = "config") -> SlurmRun:
    """Launches `overrides` on Slurm as a user would (no debug mode), then waits for every job: the data preparation
    jobs (array jobs, which `scontrol` reports one task of) until squeue drops them, the others until they end. On
    any failure while waiting, the jobs still queued are cancelled, so that none outlives the test that needed it."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        env.delenv("NEMO_LAUNCHER_DEBUG", raising=False)
        env.delenv("NEMO_LAUNCHER_FULL_ERROR", raising=False)
        code = run_launcher(["cluster_type=bcm", f"data_dir={data}", *overrides, *SLURM_CPU], results, config_name)
    assert code == 0, err.getvalue()
    rows = plan_rows(out.getvalue())
    ids = [row[2] for row in rows]
    try:
        _wait_for_arrays([row[2] for row in rows if row[0] == "data_preparation"], timeout_s=300)
        states = [cluster.wait(row[2], timeout_s=600) for row in rows if row[0] != "data_preparation"]
    except BaseException:
        subprocess.run(["scancel", *ids], check=False, timeout=20)
        raise
    return SlurmRun(results, data, out.getvalue(), rows, states)


def gpt_pipeline(cluster, work: Path) -> SlurmRun:
    """The GPT quick start's model (gpt3_tiny) through data_preparation, training, conversion (to
    convert_nemo/results/megatron_gpt.nemo), evaluation on LAMBADA-format data and export; default paths only."""
    return submit_and_wait(cluster, [*GPT_PIPELINE, *TINY_TRAINING], work / "results", work / "data")


def t5_pipeline(cluster, work: Path) -> SlurmRun:
    """The T5 quick start's pipeline (quickstart_t5: t5_tiny through data preparation with its tokenizer job,
    training, conversion to convert_nemo/results/megatron_t5.nemo, fine-tuning on generated SQuAD-format questions,
    evaluation), with short training and fine-tuning; default paths only."""
    overrides = [*TINY_TRAINING, *SHORT_FINE_TUNING]
    return submit_and_wait(cluster, overrides, work / "results", work / "data", config_name="quickstart_t5")
