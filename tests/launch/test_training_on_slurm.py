"""The tiny GPT pipeline on a real Slurm: data preparation then training on two (fake) nodes, and a training job
that gets the time-limit warning, saves, requeues itself and resumes. (A job cancelled mid-run and submitted again:
tests/launch/test_job_faults_on_slurm.py, which also checks that the resumed run ends bit-identical.)"""

import re
import subprocess
import sys
import time
from pathlib import Path

from .conftest import plan_rows

# The local cluster has 8 fake GPUs per node; jobs see no CUDA and train on the CPU.
SLURM_CPU = ["cluster.exclusive=false", "+env_vars.OMP_NUM_THREADS=1"]


def _checkpoints(results: Path):
    root = results / "gpt3_tiny" / "results" / "checkpoints"
    return sorted(int(p.name.split("-")[1]) for p in root.glob("step-*") if (p / "COMPLETE").exists())


def test_whole_tiny_pipeline_on_two_nodes(gpt_slurm_pipeline):
    """data_preparation -> training (2 nodes) -> conversion -> evaluation -> export, default paths only (the
    session's run, which tests/launch/test_prompt_pipeline_on_slurm.py prompt-tunes further)."""
    results, ids = gpt_slurm_pipeline.results, gpt_slurm_pipeline.ids
    assert len(ids) == 7
    assert gpt_slurm_pipeline.states == ["COMPLETED"] * 4, gpt_slurm_pipeline.states
    assert _checkpoints(results)[-1] == 10
    (log,) = (results / "gpt3_tiny").glob(f"log-nemo-megatron-gpt3_tiny_{ids[3]}_attempt0.out")
    assert "step=10/10" in log.read_text()
    assert (results / "gpt3_tiny" / "convert_nemo" / "results" / "megatron_gpt.nemo").exists()
    assert "perplexity" in (results / "gpt3_tiny" / "eval_lambada" / "results" / "lm_eval_results.json").read_text()
    assert list((results / "gpt3_tiny").glob("export_*/model_repo/*/config.pbtxt"))


def _train_40_steps(data):
    """The overrides of a 40-step training run on the prepared tiny Pile that saves every 10."""
    return [
        "stages=[training]",
        "training=gpt3/tiny",
        f"data_dir={data}",
        "training.trainer.max_steps=40",
        "training.exp_manager.checkpoint_callback_params.every_n_train_steps=10",
        *SLURM_CPU,
    ]


def _submit_and_wait_for_a_checkpoint(launch, train, results):
    code, out, err = launch(train, debug=False, results=results)
    assert code == 0, err
    job = plan_rows(out)[0][2]
    deadline = time.monotonic() + 300
    while not _checkpoints(results):
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.2)
    return job


def test_time_limit_warning_saves_and_the_job_requeues_itself(slurm_cluster, launch, tmp_path, tiny_pile_data):
    """SIGUSR1 is what Slurm sends cluster.signal_seconds_before_limit before the time limit: the trainer saves,
    the script requeues the job, and the next attempt resumes and finishes; no attempt's log holds a warning, and
    `status` shows the restart and its cause."""
    results, train = tmp_path / "results", _train_40_steps(tiny_pile_data)
    job = _submit_and_wait_for_a_checkpoint(launch, train, results)
    # Signal the job steps only, as the time-limit warning does (not the batch shell).
    subprocess.run(["scancel", "--signal=USR1", job], check=True)
    deadline = time.monotonic() + 120
    while "Restarts=1" not in subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the job did not requeue itself"
        time.sleep(0.5)
    # Slurm holds a requeued job back until its old credential expires (the local cluster sets 15 s).
    assert slurm_cluster.wait(job, timeout_s=600) == "COMPLETED"
    first = (results / "gpt3_tiny" / f"log-nemo-megatron-gpt3_tiny_{job}_attempt0.out").read_text()
    second = (results / "gpt3_tiny" / f"log-nemo-megatron-gpt3_tiny_{job}_attempt1.out").read_text()
    assert "stopped at step=" in first
    assert "resuming from" in second and "finished at step=40" in second
    assert _checkpoints(results)[-1] == 40
    assert not (results / "gpt3_tiny" / "results" / "RESUME_NEEDED").exists()
    # Quiet requeues: Python's resource tracker, signalled with the ranks, no longer dies and warns in the logs.
    for attempt in (0, 1):
        errors = (results / "gpt3_tiny" / f"log-nemo-megatron-gpt3_tiny_{job}_attempt{attempt}.err").read_text()
        assert not re.search(r"resource_tracker|died unexpectedly|leaked", errors), errors[-3000:]
    # status counts the restart and says why: this cluster keeps no accounting, so the count is scontrol's
    # Restarts= and the cause what attempt 0's log says stopped it (SIGUSR1, the time-limit warning).
    shown = subprocess.run(
        [sys.executable, "-m", "nemo_launcher", "status", "gpt3_tiny", "--results", str(results)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"{job} +COMPLETED +exit 0 +1 \(time limit\) ", shown.stdout), shown.stdout
