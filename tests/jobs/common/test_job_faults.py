"""The job programs under faults, run for real on the CPU: a second writer of a run directory, locks left
behind, a disk that fills before or during a checkpoint, and the error torch raises when it does.

Judged by what the programs leave behind: exit codes, the one `Error:` line, checkpoint bytes and mtimes."""

import getpass
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from nemo_launcher.contract import RESUME_MARKER, RUN_LOCK_FILE
from tests.jobs import warm_python
from tests.jobs.fault_support import plant_lock, small_filesystem, snapshot
from tests.jobs.gpt_train_support import (
    REPO,
    command,
    environment,
    log_dir,
    losses,
    run_training,
    start_training,
    weights,
    write_config,
)

SAVE_EVERY_2 = [
    "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    "trainer.val_check_interval=1000",
    "trainer.limit_val_batches=0",
    "trainer.limit_test_batches=0",
    "model.make_vocab_size_divisible_by=256",
]
# The disk tests need a checkpoint bigger than the 16 MiB a save asks for beyond the last one (storage.with_margin).
# The tiny BPE's 2,048-row embedding leaves the tiny model's checkpoint at ~3 MiB; a learned position table of
# 48,416 rows (only 32 are ever looked up: it adds to the optimizer's update and the checkpoint, not to the matmuls)
# restores the parameter count GPT-2's vocabulary gave it: 2,048 + 48,416 rows = 50,432 padded vocabulary rows + 32
# positions.
LARGE_CHECKPOINT = ["model.max_position_embeddings=48416"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    from tests.jobs.pipeline_support import build_data

    directory = tmp_path_factory.mktemp("fault_data")
    build_data(directory)
    return directory


def _wait_for(path: Path, process: subprocess.Popen, output: Path, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, output.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear in time"
        time.sleep(0.05)


# ---- one writer per run directory ----------------------------------------------------------------------


def test_a_second_training_of_a_running_run_stops_before_touching_it(data_dir, tmp_path):
    config = write_config(
        tmp_path,
        data_dir,
        [*SAVE_EVERY_2, "trainer.max_steps=1000", "exp_manager.checkpoint_callback_params.save_top_k=-1"],
    )
    run = log_dir(tmp_path)
    first_log = tmp_path / "first.log"
    first = start_training(config, first_log)
    try:
        _wait_for(run / "checkpoints" / "step-2" / "COMPLETE", first, first_log)
        # A complete checkpoint of the first run (the folder it writes meanwhile changes under any snapshot of it).
        before = snapshot(run / "checkpoints" / "step-2")
        expected = (
            f"Error: {run} is in use by {getpass.getuser()}'s job on {socket.gethostname()} (pid {first.pid}, since "
        )

        second = run_training(config, expect_rc=75, timeout=120)
        lines = second.stderr.strip().splitlines()
        assert [line for line in lines if line.startswith("Error:")] == lines[-1:] and lines[-1].startswith(expected), (
            lines
        )
        assert "; wait for it, cancel it, or use another run name" in second.stderr
        assert "run gpt3_tiny:" not in second.stdout and "starting from scratch" not in second.stdout

        # Two processes (torchrun): rank 0 refuses, torchrun stops rank 1, which exits 75 as well.
        pair = subprocess.run(
            command(config, processes=2), cwd=REPO, env=environment(), capture_output=True, text=True, timeout=180
        )
        assert pair.returncode != 0
        assert pair.stderr.count(expected) == 1, pair.stderr[-3000:]
        # torchrun's table: rank 0 exits 75; rank 1 exits 75 too, unless torchrun's SIGTERM reached it while it was
        # still starting (on a loaded machine), before it had touched anything.
        assert "exitcode  : 75 (pid" in pair.stderr and "rank      : 0" in pair.stderr, pair.stderr[-3000:]
        assert pair.stderr.count("exitcode  : 75") + pair.stderr.count("exitcode  : -15") == 2, pair.stderr[-3000:]
        assert "run gpt3_tiny:" not in pair.stdout

        assert snapshot(run / "checkpoints" / "step-2") == before  # byte for byte, untouched
    finally:
        first.send_signal(signal.SIGTERM)
        code = first.wait(timeout=120)
    assert code == 0, first_log.read_text()[-3000:]
    assert "stopping after step=" in first_log.read_text()
    assert not (run / RUN_LOCK_FILE).exists(), "the first run did not give its lock back"


def test_locks_left_by_a_dead_process_or_an_earlier_attempt_are_taken_over(data_dir, tmp_path):
    config = write_config(
        tmp_path, data_dir, [*SAVE_EVERY_2, "trainer.max_steps=2", "model.optim.sched.warmup_steps=1"]
    )
    run = log_dir(tmp_path)
    gone = subprocess.Popen(["sleep", "30"])
    from nemo_launcher.contract.processes import process_start_time

    started = process_start_time(gone.pid)
    gone.kill()
    gone.wait()
    plant_lock(run, pid=gone.pid, pid_started=started, user="bob")
    first = run_training(config)
    assert (
        f"took over {run / RUN_LOCK_FILE}, stale: bob's job on {socket.gethostname()} (pid {gone.pid}" in first.stdout
    )
    assert (run / "checkpoints" / "step-2" / "COMPLETE").is_file() and not (run / RUN_LOCK_FILE).exists()

    # An attempt of Slurm job 4242 that died on another node; its requeued attempt takes over.
    plant_lock(run, host="node-that-died", pid=1, job_id="4242", job_label="4242")
    env = dict(environment(), SLURM_JOB_ID="4242")
    again = subprocess.run(command(config), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        "stale: an earlier attempt of this Slurm job (" in again.stdout
        and "job 4242 on node-that-died (pid 1" in again.stdout
    )
    assert "resuming from" in again.stdout
    assert not (run / RUN_LOCK_FILE).exists()


def _stage_configs(work: Path, data_dir: Path):
    """Resolved configs of every writing stage after training, as the launcher plans them (nothing runs)."""
    from tests.jobs.pipeline_support import plan_pipeline

    planned = plan_pipeline(
        work,
        [
            "stages=[training,conversion,evaluation,export,fine_tuning,peft]",
            "training=gpt3/tiny",
            "fine_tuning=gpt3/squad",
            "peft=gpt3/squad",
            # This machine has no GPU: a real run here refuses the tunings' 8 GPU processes.
            *(
                f"{stage}.trainer.{key}"
                for stage in ("fine_tuning", "peft")
                for key in ("accelerator=cpu", "devices=1")
            ),
        ],
        data_dir,
    )
    return planned.configs


@pytest.mark.parametrize(
    "stage,module",
    [
        ("conversion", "convert"),
        ("evaluation", "evaluate"),
        ("export", "export"),
        ("fine_tuning", "finetune"),
        ("peft", "peft"),
    ],
)
def test_every_writing_job_refuses_a_directory_in_use(data_dir, tmp_path, stage, module):
    import yaml

    config = _stage_configs(tmp_path, data_dir)[stage]
    section = yaml.safe_load(config.read_text())
    directory = Path(
        section["exp_manager"]["explicit_log_dir"]
        if stage in ("fine_tuning", "peft")
        else section["run"]["results_dir"]
    )
    plant_lock(directory, job_id="777", job_label="777", user="alice")
    before = sorted(p.name for p in directory.iterdir())
    result = subprocess.run(
        [warm_python.interpreter(), "-u", "-m", f"nemo_launcher.jobs.gpt.{module}", "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 75, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"Error: {directory} is in use by alice's job 777 on {socket.gethostname()} (pid {os.getpid()}, since "
        )
    )
    assert sorted(p.name for p in directory.iterdir()) == before


# ---- a disk that fills ---------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "two-processes"])
def test_a_checkpoint_that_does_not_fit_stops_the_job_and_keeps_the_last_one(data_dir, tmp_path, processes):
    # The tiny model's checkpoint is ~39 MiB, and a save asks for 10% + 16 MiB more than the last one took:
    # 80 MiB hold step-2; step-4 does not fit beside it. With two processes (data parallel) both stop, and
    # rank 0 alone says why.
    with small_filesystem(tmp_path / "disk", "80m") as disk:
        run = disk / "run"
        config = write_config(
            tmp_path,
            data_dir,
            [
                *SAVE_EVERY_2,
                *LARGE_CHECKPOINT,
                "trainer.max_steps=6",
                f"trainer.devices={processes}",
                f"exp_manager.explicit_log_dir={run}",
            ],
        )
        run.mkdir()
        (run / RESUME_MARKER).write_text("left by an earlier attempt that stopped on SIGUSR1\n")
        result = subprocess.run(
            command(config, processes), cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300
        )
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, result.stderr[-3000:]
        assert errors[0].startswith(
            f"Error: no space for checkpoint step-4 in {run / 'checkpoints'}: it needs about "
        ), errors
        assert "MB, the file system has " in errors[0] and "MB free." in errors[0]
        assert "The newest complete checkpoint, step-2, is kept and the job does not requeue itself" in errors[0]
        if processes == 1:
            assert result.returncode == 74
        else:
            assert result.returncode != 0 and result.stderr.count("exitcode  : 74") == 2, result.stderr[-3000:]
        assert sorted(losses(result.stdout)) == [1, 2, 3, 4]
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
        assert not (run / RESUME_MARKER).exists() and not (run / RUN_LOCK_FILE).exists()
        saved = weights(run / "checkpoints" / "step-2", tmp_path)  # loadable, by torch's own reader
        assert len(saved) > 10 and all(t.isfinite().all() for t in saved.values())


def test_a_save_that_fills_the_disk_is_explained_and_cleaned_up(data_dir, tmp_path):
    # A newest complete checkpoint far smaller than the next one (a run restarted with a bigger model and
    # resume_if_exists=false) lets the check before saving pass; the save itself then runs out of space, and
    # torch reports that without an errno (see test_torch_reports_a_full_disk_without_saying_so).
    with small_filesystem(tmp_path / "disk", "30m") as disk:
        run = disk / "run"
        small = run / "checkpoints" / "step-0"
        small.mkdir(parents=True)
        (small / "COMPLETE").write_text('{"step": 0}\n')
        config = write_config(
            tmp_path,
            data_dir,
            [
                *SAVE_EVERY_2,
                *LARGE_CHECKPOINT,
                "trainer.max_steps=2",
                "model.optim.sched.warmup_steps=1",
                "exp_manager.resume_if_exists=false",
                f"exp_manager.explicit_log_dir={run}",
            ],
        )
        (run / RESUME_MARKER).write_text("left by an earlier attempt\n")
        result = run_training(config, expect_rc=74)
        error = result.stderr.strip().splitlines()[-1]
        assert error.startswith(
            f"Error: checkpoint step-2 could not be written to {run / 'checkpoints'}: the file system "
            "is full (it needs about "
        ), error
        assert "free when the write failed). The newest complete checkpoint, step-0, is kept" in error
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0"]  # the partial step-2 is gone
        assert (small / "COMPLETE").read_text() == '{"step": 0}\n'
        assert not (run / RESUME_MARKER).exists() and not (run / RUN_LOCK_FILE).exists()


def test_torch_reports_a_full_disk_without_saying_so(tmp_path):
    import torch

    from nemo_launcher.jobs.common.storage import storage_errno, storage_fault

    with small_filesystem(tmp_path / "disk", "8m") as disk:
        with pytest.raises(Exception) as raised:
            torch.save(torch.zeros(4 * 2**20), disk / "weights.pt")  # 16 MiB
        assert "unexpected pos" in str(raised.value) and storage_errno(raised.value) is None
        fault = storage_fault(raised.value, disk, 16 * 2**20, "the weights", "Free space.")
        assert fault is not None and fault.exit_code == 74
        assert str(fault).startswith(f"the weights could not be written to {disk}: the file system is full")
    # The same error where there is room to spare was not about space: it stays a crash.
    assert storage_fault(raised.value, tmp_path, 16 * 2**20, "the weights", "Free space.") is None
