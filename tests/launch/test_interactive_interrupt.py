"""Ctrl-C or SIGTERM while stages run here (cluster_type=interactive): the running stage is stopped with all its
processes, later stages are not run, the ledger records it, and the exit code is 128 + the signal number."""

import json
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from nemo_launcher.launch.errors import StageInterrupted
from nemo_launcher.launch.interrupts import SIGNALS
from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.ledger import open_ledger
from nemo_launcher.launch.pipeline import Plan, PlannedJob, build_plan, submit_plan, write_plan

from .conftest import compose_config


def _plan(tmp_path: Path, sleeps):
    cfg, choices = compose_config(
        [
            "stages=[training]",
            "training=gpt3/tiny",
            "cluster_type=interactive",
            "++check_inputs=false",
            f"base_results_dir={tmp_path}/r",
        ]
    )
    backend = build_plan(cfg, choices).backend
    record = tmp_path / "record.txt"
    stages = []
    for index, sleep in enumerate(sleeps):
        name = f"s{index}"
        spec = JobSpec(
            stage=name,
            name=name,
            directory=tmp_path / "r" / name,
            time_limit=timedelta(minutes=5),
            commands=(
                Command("tests.launch.slurm_probe", ("--record", str(record), "--name", name, "--sleep", str(sleep))),
            ),
        )
        stages.append([PlannedJob(spec, backend.script_path(spec), backend.render(spec))])
    return Plan(backend.context, backend, stages), record


def _probes_alive(record: Path):
    """Processes still running a probe of this test (their command line names its record file)."""
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(record).encode() in (entry / "cmdline").read_bytes():
                alive.append(int(entry.name))
        except OSError:
            continue
    return alive


def _signal_once_running(directory: Path, signal_number: int, deadline_s: float = 120.0):
    """Sends the signal to this process as soon as the stage writing into `directory` has started (its log exists)."""

    def wait_then_signal():
        stop = time.monotonic() + deadline_s
        while not list(directory.glob("log-*.out")) and time.monotonic() < stop:
            time.sleep(0.05)
        os.kill(os.getpid(), signal_number)

    thread = threading.Thread(target=wait_then_signal, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signal_number", SIGNALS, ids=[signal.Signals(number).name for number in SIGNALS])
def test_signal_stops_the_running_stage_and_the_later_ones(tmp_path, monkeypatch, signal_number):
    monkeypatch.chdir(tmp_path)
    handlers = {number: signal.getsignal(number) for number in SIGNALS}
    plan, record = _plan(tmp_path, [0, 300, 0])
    write_plan(plan, ["main.py"])
    ledger = open_ledger(plan, ["main.py"])
    thread = _signal_once_running(tmp_path / "r" / "s1", signal_number)
    with pytest.raises(StageInterrupted) as stopped:
        submit_plan(plan, ledger)
    thread.join()
    assert stopped.value.exit_code == 128 + signal_number
    assert f"stage 's1' (job s1) was stopped by {signal.Signals(signal_number).name}" in str(stopped.value)
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["s0"]  # s1 never finished, s2 never ran
    assert not _probes_alive(record)
    saved = json.loads(ledger.path.read_text())
    assert saved["state"] == "interrupted"
    assert [job["exit_code"] for job in saved["jobs"]] == [0, 128 + signal_number, None]
    assert saved["jobs"][2]["started"] is None
    assert {number: signal.getsignal(number) for number in handlers} == handlers
