"""Training jobs under faults on a real Slurm: scancel mid-run, a second job on a run directory in use, a
disk that fills. Each submits the tiny GPT as `python3 main.py stages=[training] ...` does (training on the
CPU of the fake GPU nodes) and judges the jobs by their state, exit code, logs and checkpoints."""

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from nemo_launcher.contract import RESUME_MARKER, RUN_LOCK_FILE
from tests.jobs.fault_support import small_filesystem
from tests.jobs.gpt_train_support import REPO, environment, losses, weights

from .conftest import plan_rows

# The local cluster has 8 fake GPUs per node; jobs see no CUDA and train on the CPU.
SLURM_CPU = ["cluster.exclusive=false", "+env_vars.OMP_NUM_THREADS=1"]
# Short steps (32 tokens), a progress line per step, no validation or test passes.
SHORT = [
    "training.model.encoder_seq_length=32",
    "training.trainer.log_every_n_steps=1",
    "training.trainer.val_check_interval=1000",
    "training.trainer.limit_val_batches=0",
    "training.trainer.limit_test_batches=0",
]
# Long enough for the first job to outlive a second job's start and refusal, which takes its rank 0 the 10 s of
# REFUSAL_GRACE_S (a step, its checkpoint every 10 steps included, takes ~0.05 s on an idle machine: 200 steps ended
# before the refusal did, the lock went with them, and the second job's late rank 1 found no holder).
STEPS = 500


def _submit(launch, overrides, results: Path) -> str:
    code, out, err = launch(overrides, debug=False, results=results)
    assert code == 0, err
    return plan_rows(out)[0][2]


def _log(results: Path, job: str, suffix: str = "out", run: str = "gpt3_tiny") -> Path:
    return results / run / f"log-nemo-megatron-{run}_{job}_attempt0.{suffix}"


def _wait_for_text(path: Path, pattern: str, slurm_cluster, job: str, timeout_s: float = 300) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while True:
        found = re.search(pattern, path.read_text(), re.M) if path.exists() else None
        if found:
            return found
        state = slurm_cluster.job_state(job)
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job} is {state} without printing {pattern!r}"
        assert time.monotonic() < deadline, f"{pattern!r} not in {path} within {timeout_s} s"
        time.sleep(0.2)


def _show_job(job: str) -> str:
    return subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=True).stdout


def test_scancel_saves_a_complete_checkpoint_and_the_resubmission_continues_bit_identically(
    slurm_cluster, launch, tmp_path, tiny_pile_data
):
    results = tmp_path / "results"
    train = [
        "stages=[training]",
        "training=gpt3/tiny",
        f"data_dir={tiny_pile_data}",
        *SHORT,
        f"training.trainer.max_steps={STEPS}",
        "training.exp_manager.checkpoint_callback_params.every_n_train_steps=10",
        "training.exp_manager.checkpoint_callback_params.save_top_k=-1",
        "training.model.data.num_workers=1",  # scancel signals the DataLoader worker too
        *SLURM_CPU,
    ]
    run = results / "gpt3_tiny" / "results"
    first = _submit(launch, train, results)
    _wait_for_text(_log(results, first), r"^run gpt3_tiny: ", slurm_cluster, first)  # it holds the lock by now

    # While it trains, a second job (2 processes, its own name so that `singleton` does not hold it back)
    # aims at the same run directory: it stops at once, both ranks with the documented code. Its rank 1 starts
    # 3 s late, as on a loaded node, where it once got srun's SIGTERM before its handler was in place (exit 143).
    late = tmp_path / "rank_1_starts_late.sh"
    late.write_text(f'#!/bin/bash\nif [[ "$SLURM_PROCID" == 1 ]]; then sleep 3; fi\nexec {sys.executable} "$@"\n')
    late.chmod(0o755)
    intruder = _submit(
        launch,
        [
            *train,
            "training.run.name=gpt3_tiny_again",
            f"training.exp_manager.explicit_log_dir={run}",
            "training.trainer.devices=2",
            f"+env_vars.NEMO_LAUNCHER_PYTHON={late}",
        ],
        results,
    )
    assert slurm_cluster.wait(intruder, timeout_s=120) == "FAILED"
    refusal = _log(results, intruder, "err", run="gpt3_tiny_again").read_text()
    exit_code = re.search(r"\bExitCode=\S+", _show_job(intruder)).group(0)
    assert exit_code == "ExitCode=75:0", f"{exit_code}; the intruder's error log:\n{refusal[-3000:]}"
    assert re.search(
        rf"^Error: {re.escape(str(run))} is in use by \S+'s job {first} on \S+ \(pid \d+, since ", refusal, re.M
    ), refusal

    _wait_for_text(_log(results, first), r"^checkpoint step=10 saved", slurm_cluster, first)
    assert slurm_cluster.job_state(first) == "RUNNING", f"job {first} ended before it could be cancelled; raise STEPS"
    subprocess.run(["scancel", first], check=True)
    assert slurm_cluster.wait(first, timeout_s=120) == "CANCELLED"
    out, err = _log(results, first).read_text(), _log(results, first, "err").read_text()
    stop = re.search(r"^stopping after step=(\d+): signal SIGTERM received$", out, re.M)
    assert stop, f"no stop-signal save; the job's error log ends:\n{err[-3000:]}"
    stopped = int(stop.group(1))
    assert 10 < stopped < STEPS and f"checkpoint step={stopped} saved" in out
    assert "Traceback" not in err and "Error" not in err, err
    assert (run / "checkpoints" / f"step-{stopped}" / "COMPLETE").is_file() and not (run / RUN_LOCK_FILE).exists()

    # The reference: an uninterrupted run from a copy of that checkpoint, here, outside Slurm.
    reference = tmp_path / "reference"
    shutil.copytree(run / "checkpoints" / f"step-{stopped}", reference / "checkpoints" / f"step-{stopped}")
    config = yaml.safe_load((results / "gpt3_tiny" / "gpt3_tiny_hydra.yaml").read_text())
    config["exp_manager"]["explicit_log_dir"] = str(reference)
    (tmp_path / "reference.yaml").write_text(yaml.safe_dump(config))

    second = _submit(launch, train, results)  # the same command again, now that the first job has ended
    uninterrupted = subprocess.run(
        [sys.executable, "-u", "-m", "nemo_launcher.jobs.gpt.train", "--config", str(tmp_path / "reference.yaml")],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert slurm_cluster.wait(second, timeout_s=600) == "COMPLETED"
    resumed = _log(results, second).read_text()
    assert f"resuming from {run / 'checkpoints' / f'step-{stopped}'}" in resumed
    expected = losses(uninterrupted.stdout)
    assert sorted(expected) == list(range(stopped + 1, STEPS + 1)) and losses(resumed) == expected
    ours = weights(run / "checkpoints" / f"step-{STEPS}", tmp_path)
    theirs = weights(reference / "checkpoints" / f"step-{STEPS}", tmp_path)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_a_full_disk_ends_the_job_with_74_and_no_requeue(slurm_cluster, launch, tmp_path, tiny_pile_data):
    # The tiny model made wider (hidden 320: about 36 MiB per checkpoint with Adam's state), and a save asks for 10%
    # + 16 MiB more than the last one took: 80 MiB hold step-2 (and the job's logs); step-4 does not fit beside it.
    with small_filesystem(tmp_path / "disk", "80m") as results:
        run = results / "gpt3_tiny" / "results"
        run.mkdir(parents=True)
        # Left by an earlier attempt that stopped on SIGUSR1: the script would requeue the job while it exists.
        (run / RESUME_MARKER).write_text("stopped before trainer.max_steps after saving a checkpoint\n")
        job = _submit(
            launch,
            [
                "stages=[training]",
                "training=gpt3/tiny",
                f"data_dir={tiny_pile_data}",
                *SHORT,
                "training.model.hidden_size=320",
                "training.trainer.max_steps=6",
                "training.exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                *SLURM_CPU,
            ],
            results,
        )
        assert slurm_cluster.wait(job, timeout_s=300) == "FAILED"
        shown = _show_job(job)
        assert "ExitCode=74:0" in shown and "Restarts=0" in shown, shown
        error = _log(results, job, "err").read_text()
        assert re.search(
            rf"^Error: no space for checkpoint step-4 in {re.escape(str(run / 'checkpoints'))}: it needs about "
            r"[\d.]+ MB, the file system has [\d.]+ [kM]?B free\. The newest complete checkpoint, step-2, is kept",
            error,
            re.M,
        ), error
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
        assert (run / "checkpoints" / "step-2" / "COMPLETE").is_file()
        assert not (run / RESUME_MARKER).exists() and not (run / RUN_LOCK_FILE).exists()
