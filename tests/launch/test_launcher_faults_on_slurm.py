"""The launcher's own faults on a real Slurm, with the launcher run as a program (`python3 main.py ...`):

- SIGHUP (the terminal closes) while an `sbatch` is in flight: rollback, exit 3, one line, nothing stays queued;
- SIGKILL while its first `sbatch` is in flight: sbatch queues the job anyway; the next command adopts it (status
  and cancel see it) and the same command again queues no second copy;
- two identical launches at the same instant, 20 times: one pipeline each time, the other command exits 5;
- a ledger record cut short or with a damaged job entry: the jobs it hides still refuse the same command, and
  `cancel` still cancels them, found by their tags in squeue.

An `sbatch` wrapper first on PATH delays the real sbatch, so that a signal lands while it runs. Jobs are held for
an hour (`--begin=now+3600`), so none of them runs; each test cancels what it queued.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT

from .test_faults_on_slurm import LIVE, _jobs_named
from .test_training_on_slurm import SLURM_CPU

# Every job is held (--begin=now+3600) and none takes a node: this module runs beside the other Slurm tests
# (tests/conftest.py).
HELD_JOBS_ONLY = True
STAGES = ["training", "conversion", "evaluation", "export"]
PREFIXES = {"training": "", "conversion": "convert_", "evaluation": "eval_all_", "export": "export_"}


class Launcher:
    """Runs `main.py` for one run name with an sbatch wrapper that sleeps `delay_s` before the real sbatch."""

    def __init__(self, tmp_path: Path, stages=("training",), delay_s: float = 0.0):
        self.run_name = f"lf_{uuid.uuid4().hex[:8]}"
        self.results = tmp_path / "results"
        self.stages = list(stages)
        self.bin_dir = tmp_path / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        wrapper = self.bin_dir / "sbatch"
        real = shutil.which("sbatch")
        wrapper.write_text(
            f'#!/usr/bin/env bash\necho "$$" >> "{self.bin_dir}/calls"\nsleep {delay_s}\nexec {real} "$@"\n'
        )
        wrapper.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if k != "NEMO_LAUNCHER_DEBUG"}
        self.env["PATH"] = f"{self.bin_dir}:{self.env['PATH']}"

    @property
    def names(self) -> list[str]:
        return [f"nemo-megatron-{PREFIXES[stage]}{self.run_name}" for stage in self.stages]

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "main.py",
            f"stages=[{','.join(self.stages)}]",
            "training=gpt3/tiny",
            f"training.run.name={self.run_name}",
            "++check_inputs=false",
            "+cluster.begin=now+3600",
            f"base_results_dir={self.results}",
            *SLURM_CPU,
        ]

    def start(self) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(), cwd=REPO_ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def run(self) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(), cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, timeout=300)

    def command(self, *words) -> subprocess.CompletedProcess:
        """`python3 -m nemo_launcher <words> --results <results>`."""
        argv = [sys.executable, "-m", "nemo_launcher", *words, "--results", str(self.results)]
        return subprocess.run(argv, cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, timeout=120)

    def sbatch_calls(self) -> int:
        calls = self.bin_dir / "calls"
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    def jobs(self) -> list[tuple[str, str]]:
        return [job for name in self.names for job in _jobs_named(name)]

    def live_jobs(self) -> list[tuple[str, str]]:
        return [(job_id, state) for job_id, state in self.jobs() if state in LIVE]

    def cancel_everything(self) -> None:
        leftovers = [job_id for job_id, state in self.jobs() if state in LIVE]
        if leftovers:
            subprocess.run(["scancel", *leftovers], check=False)


@pytest.fixture
def launchers(slurm_cluster, tmp_path):
    """launchers(**Launcher options) -> a new Launcher; whatever they queued is cancelled afterwards."""
    made = []

    def make(**options):
        made.append(Launcher(tmp_path / f"l{len(made)}", **options))
        return made[-1]

    yield make
    for launcher in made:
        launcher.cancel_everything()


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _record(results: Path) -> dict:
    (path,) = (results / ".ledger").glob("*.json")
    return json.loads(path.read_text())


def test_sighup_while_sbatch_is_in_flight_rolls_back_and_leaves_nothing_queued(launchers):
    launcher = launchers(stages=STAGES, delay_s=2)
    process = launcher.start()
    _wait_for(lambda: launcher.sbatch_calls() == 2, 120, "the second sbatch call")
    process.send_signal(signal.SIGHUP)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 3, err
    (line,) = [line for line in err.splitlines() if line.startswith("Error:")]
    assert line.startswith(
        "Error: interrupted by SIGHUP (the terminal closed) while submitting job 2 of 4 (conversion); rolled back"
    ), line
    cancelled = line.rsplit(": ", 1)[1].split(", ")
    assert len(cancelled) == 2  # the first job, and the second, whose sbatch was let finish
    assert sorted(job_id for job_id, _ in launcher.jobs()) == sorted(cancelled)
    assert not launcher.live_jobs()
    assert _record(launcher.results)["state"] == "rolled_back"


def test_sigkill_while_the_first_sbatch_is_in_flight_is_adopted_and_never_queued_twice(launchers):
    launcher = launchers(stages=STAGES, delay_s=2)
    process = launcher.start()
    _wait_for(lambda: launcher.sbatch_calls() == 1, 120, "the first sbatch call")
    process.kill()
    process.communicate(timeout=60)
    # sbatch runs in its own session: it outlives the launcher and queues the training job.
    ((job_id, state),) = _wait_for(launcher.jobs, 60, "the orphaned sbatch to queue its job")
    assert state == "PENDING"

    status = launcher.command("status", launcher.run_name)
    assert status.returncode == 0, status.stderr
    assert "Traceback" not in status.stderr
    assert "died while submitting; found " + f"{job_id} (training) queued under its tags" in status.stderr
    assert "never submitted: conversion, evaluation, export; the record now says abandoned" in status.stderr
    rows = [line.split() for line in status.stdout.splitlines()[2:]]
    assert rows[0][:3] == ["training", launcher.names[0], job_id] and rows[0][3] == "PENDING", status.stdout
    assert _record(launcher.results)["state"] == "abandoned"

    again = launcher.run()
    assert again.returncode == 5, again.stderr
    assert f"jobs of this run are still queued or running: {job_id} (training" in again.stderr
    assert launcher.jobs() == [(job_id, "PENDING")]  # no second copy

    cancel = launcher.command("cancel", launcher.run_name)
    assert cancel.returncode == 0, cancel.stderr
    assert not launcher.live_jobs()


def test_two_identical_launches_at_the_same_instant_queue_one_pipeline(launchers):
    # The sbatch wrapper's half second widens the window between the live-run check and the first job id in
    # the ledger, which two launches without a lock both pass.
    failures = []
    for trial in range(20):
        launcher = launchers(delay_s=0.5)
        first, second = launcher.start(), launcher.start()
        results = [(process, *process.communicate(timeout=300)) for process in (first, second)]
        codes = sorted(process.returncode for process, _, _ in results)
        queued = launcher.jobs()
        if codes != [0, 5] or len(queued) != 1:
            failures.append((trial, codes, queued, [err[-400:] for _, _, err in results]))
            continue
        (refused,) = [err for process, _, err in results if process.returncode == 5]
        (line,) = [line for line in refused.splitlines() if line.startswith("Error:")]
        assert "is submitting this run right now" in line or "still queued or running" in line, line
        launcher.cancel_everything()
    assert not failures, failures


def _submitted(launcher: Launcher):
    """Submits the launcher's pipeline: (its ledger record's path, the record, the job ids)."""
    submitted = launcher.run()
    assert submitted.returncode == 0, submitted.stderr
    (path,) = (launcher.results / ".ledger").glob("*.json")
    record = json.loads(path.read_text())
    return path, record, [job["job_id"] for job in record["jobs"]]


@pytest.mark.parametrize("damage", ["cut short", "null job entry"])
def test_a_damaged_record_hides_no_job_from_the_same_command_or_from_cancel(launchers, damage):
    launcher = launchers(stages=STAGES)
    path, record, ids = _submitted(launcher)
    if damage == "cut short":  # a disk that filled up mid-write: the file ends inside the third job's entry
        text = path.read_text()
        path.write_text(text[: text.index(f'"job_id": "{ids[2]}"') - 10])
        hidden = ids[2:]
    else:
        record["jobs"][1] = None
        path.write_text(json.dumps(record, indent=1))
        hidden = ids[1:2]

    again = launcher.run()
    assert again.returncode == 5, again.stderr
    assert "Traceback" not in again.stderr and f"ledger record {path} is damaged (" in again.stderr
    (line,) = [line for line in again.stderr.splitlines() if line.startswith("Error:")]
    assert all(f"{job_id} (" in line for job_id in ids), line
    assert len(launcher.jobs()) == 4

    status = launcher.command("status", record["id"])
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr

    cancel = launcher.command("cancel", record["id"])
    assert cancel.returncode == 0 and "Traceback" not in cancel.stderr, cancel.stderr
    assert all(f"{job_id}" in cancel.stdout for job_id in hidden), cancel.stdout
    assert "cancelled 4 of 4 jobs" in cancel.stdout
    assert not launcher.live_jobs()


def test_a_deleted_record_hides_no_job_from_the_same_command_or_from_cancel(launchers):
    launcher = launchers(stages=STAGES)
    path, record, ids = _submitted(launcher)
    path.unlink()

    again = launcher.run()
    assert again.returncode == 5, again.stderr
    (line,) = [line for line in again.stderr.splitlines() if line.startswith("Error:")]
    assert all(f"{job_id} (" in line for job_id in ids) and f"cancel {record['id']}" in line, line
    assert len(launcher.jobs()) == 4 and not list((launcher.results / ".ledger").glob("*.json"))

    cancel = launcher.command("cancel", record["id"])
    assert cancel.returncode == 0, cancel.stderr
    assert f"No ledger record matches {record['id']!r}; cancelled 4 job(s) found in squeue" in cancel.stdout
    assert not launcher.live_jobs()
