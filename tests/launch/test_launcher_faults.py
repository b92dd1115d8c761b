"""The pieces behind the launcher's own faults, without a cluster: reading the launcher's tags out of squeue, the
run lock (held, refused with the holder named, freed by the holder's death), and the adoption of a dead
launcher's jobs by the next command (against a scripted squeue). test_launcher_faults_on_slurm.py runs the same
faults on the real local Slurm."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nemo_launcher.contract.processes import process_start_time
from nemo_launcher.launch.errors import RunInProgress
from nemo_launcher.launch.orphans import ABANDONED_AFTER_S, launcher_gone
from nemo_launcher.launch.run_lock import hold_run_lock, lock_path
from nemo_launcher.launch.slurm_tags import parse_squeue, parse_tag

from .test_ledger import _calls, _run, _write_record
from .test_ledger import fake_slurm as fake_slurm  # noqa: F401 - the fixture, shared with the ledger's tests

# ---- tags in squeue ------------------------------------------------------------------------------------------


def test_tags_are_read_from_the_last_word_of_the_comment():
    assert parse_tag("nemo-launcher:20261129-101010-gpt3_5b-ab12:3") == ("20261129-101010-gpt3_5b-ab12", 3)
    assert parse_tag("my project | team nemo-launcher:p1:0") == ("p1", 0)  # a user's own comment comes first
    assert parse_tag("nemo-launcher:p1:0 then more") is None
    assert parse_tag("") is None and parse_tag("(null)") is None


def test_squeue_listing_gives_one_entry_per_job_with_its_directory():
    output = "\n".join(
        [
            "71|RUNNING|/r/gpt|nemo-megatron-gpt|nemo-launcher:p1:0",
            "72|PENDING|/r/conv|nemo-megatron-convert_gpt|a|b nemo-launcher:p1:1",  # `|` inside a user's comment
            "80|RUNNING|/r/data|data|nemo-launcher:p2:0",  # an array: a line per running task ...
            "80|PENDING|/r/data|data|nemo-launcher:p2:0",  # ... and one for the pending rest
            "90|CANCELLED|/r/old|old|nemo-launcher:p0:0",
            "91|PENDING|/home/u|myjob|(null)",  # not the launcher's
            "garbage",
        ]
    )
    jobs = {job.job_id: job for job in parse_squeue(output)}
    assert sorted(jobs) == ["71", "72", "80", "90"]
    assert (jobs["72"].pipeline_id, jobs["72"].index, jobs["72"].directory) == ("p1", 1, "/r/conv")
    assert jobs["80"].state == "RUNNING" and jobs["80"].tag == "nemo-launcher:p2:0"


# ---- the run lock --------------------------------------------------------------------------------------------


def _plan(results: Path, *names: str):
    jobs = [[SimpleNamespace(spec=SimpleNamespace(directory=results / name))] for name in names]
    return SimpleNamespace(context=SimpleNamespace(base_results_dir=results), jobs_by_stage=jobs)


def test_a_held_run_lock_refuses_a_second_launcher_naming_the_first(tmp_path):
    plan = _plan(tmp_path, "gpt3_5b", "convert_gpt3_5b")
    with hold_run_lock(plan, ["main.py", "training=gpt3/5b"]):
        with pytest.raises(RunInProgress) as refused:
            with hold_run_lock(_plan(tmp_path, "convert_gpt3_5b"), ["main.py"]):
                pytest.fail("two holders")
        message = str(refused.value)
        assert f"another launcher (pid {os.getpid()} on {socket.gethostname()}, since " in message
        assert ": main.py training=gpt3/5b) is submitting this run right now" in message
        assert refused.value.exit_code == 5
        # Another run's directories are not locked.
        with hold_run_lock(_plan(tmp_path, "other"), ["main.py"]):
            pass
    with hold_run_lock(plan, ["main.py"]):  # released when the block ended
        pass


def test_the_lock_of_a_killed_holder_is_free(tmp_path):
    directory = tmp_path / "gpt3_5b"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from types import SimpleNamespace as N\n"
            "from nemo_launcher.launch.run_lock import hold_run_lock\n"
            f"plan = N(context=N(base_results_dir=Path({str(tmp_path)!r})), "
            f"jobs_by_stage=[[N(spec=N(directory=Path({str(directory)!r})))]])\n"
            "with hold_run_lock(plan, ['main.py']):\n    print('held', flush=True); time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(RunInProgress, match=f"pid {holder.pid} "):
        with hold_run_lock(_plan(tmp_path, "gpt3_5b"), ["main.py"]):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with hold_run_lock(_plan(tmp_path, "gpt3_5b"), ["main.py"]):
        assert lock_path(tmp_path, directory).is_file()


# ---- a launcher that died while submitting -------------------------------------------------------------------


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_who_counts_as_gone():
    here = socket.gethostname()
    now = time.time()
    mine = {"state": "submitting", "cluster_type": "bcm", "host": here, "created": "2026-01-01T00:00:00+00:00"}
    alive = {**mine, "launcher_pid": os.getpid(), "launcher_started": process_start_time(os.getpid())}
    assert not launcher_gone(alive)
    assert launcher_gone({**mine, "launcher_pid": _dead_pid()})
    assert launcher_gone({**alive, "launcher_started": "1"})  # the pid was reused
    assert not launcher_gone({**alive, "state": "submitted"})
    elsewhere = {**mine, "host": "login2", "launcher_pid": 1}
    young = datetime_text(now - 60)
    assert not launcher_gone({**elsewhere, "created": young}, now)  # cannot ask login2; too young to tell
    assert launcher_gone({**elsewhere, "created": datetime_text(now - ABANDONED_AFTER_S - 1)}, now)


def datetime_text(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _abandoned_record(results: Path) -> dict:
    record = _write_record(
        results,
        "20261129-101010-gpt-ab12",
        "2026-11-29T10:10:10.000+00:00",
        [("training", "gpt", None), ("conversion", "convert_gpt", None)],
        state="submitting",
        host=socket.gethostname(),
        launcher_pid=_dead_pid(),
    )
    for index, job in enumerate(record["jobs"]):
        job["tag"] = f"nemo-launcher:{record['id']}:{index}"
    (results / ".ledger" / f"{record['id']}.json").write_text(json.dumps(record))
    return record


def test_the_next_command_adopts_what_a_dead_launcher_queued(fake_slurm, tmp_path, capsys):
    results = tmp_path / "results"
    record = _abandoned_record(results)
    directory = record["jobs"][0]["directory"]
    listing = f"4242|PENDING|{directory}|nemo-megatron-gpt|nemo-launcher:{record['id']}:0"
    calls = fake_slurm(squeue=f'case "$*" in *%Z*) echo "{listing}";; *) echo "4242|PENDING|0:00|BeginTime";; esac')

    code, out, err = _run(capsys, "status", "gpt", "--results", results)
    assert code == 0, err
    assert (
        f"Note: the launcher of pipeline {record['id']} (pid {record['launcher_pid']} on {socket.gethostname()}) died "
        "while submitting; found 4242 (training) queued under its tags; never submitted: conversion; the record now "
        "says abandoned"
    ) in err
    assert [line.split()[:4] for line in out.splitlines()[2:]][0] == [
        "training",
        "nemo-megatron-gpt",
        "4242",
        "PENDING",
    ]
    saved = json.loads((results / ".ledger" / f"{record['id']}.json").read_text())
    assert saved["state"] == "abandoned" and saved["jobs"][0]["job_id"] == "4242" and saved["adopted"] == ["4242"]

    # Adopted once: later commands read the record as it now is and ask nothing more of squeue's tags.
    calls.write_text("")
    code, out, err = _run(capsys, "status", "gpt", "--results", results)
    assert code == 0 and "Note:" not in err
    assert not [call for call in _calls(calls, "squeue") if "%Z" in call]


def test_a_failed_look_up_is_a_warning_and_the_record_stays_as_it_was(fake_slurm, tmp_path, capsys):
    results = tmp_path / "results"
    record = _abandoned_record(results)
    fake_slurm(squeue='echo "squeue: error: Unable to contact slurm controller" >&2; exit 1')
    code, out, err = _run(capsys, "status", "gpt", "--results", results)
    assert "Traceback" not in err
    assert (
        f"Warning: the launcher of pipeline {record['id']} died while submitting, and its jobs cannot be looked up"
        in err
    )
    saved = json.loads((results / ".ledger" / f"{record['id']}.json").read_text())
    assert saved["state"] == "submitting"
