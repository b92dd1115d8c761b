"""The run directory lock on its own: who may take it, what a refusal says, which locks count as stale.

No torch here; tests/jobs/common/test_job_faults.py runs the job programs against it."""

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_launcher.contract import RUN_DIRECTORY_IN_USE_EXIT_CODE, RUN_LOCK_FILE
from nemo_launcher.contract.processes import process_start_time
from nemo_launcher.jobs.common.run_lock import (
    Holder,
    RunDirectoryInUse,
    RunDirectoryLock,
    squeue_lists,
    this_process,
)


def holder(**changes) -> Holder:
    """A live holder by default: this test process, on this host, outside Slurm."""
    base = this_process(env={})
    return dataclasses.replace(base, **changes)


def plant(directory: Path, who: Holder) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_LOCK_FILE
    path.write_text(who.to_json())
    return path


def never_asked(job_id):
    raise AssertionError(f"squeue must not be asked about {job_id} here")


def test_the_lock_names_its_holder_and_goes_away_on_release(tmp_path):
    me = this_process(env={"SLURM_JOB_ID": "1234", "SLURM_ARRAY_JOB_ID": "1230", "SLURM_ARRAY_TASK_ID": "4"})
    lock = RunDirectoryLock(tmp_path / "run", me=me, job_is_live=never_asked)
    assert lock.acquire() is None
    recorded = json.loads((tmp_path / "run" / RUN_LOCK_FILE).read_text())
    assert recorded["host"] == socket.gethostname() and recorded["pid"] == os.getpid()
    assert recorded["job_id"] == "1234" and recorded["job_label"] == "1230_4" and recorded["user"]
    assert abs(recorded["since"] - time.time()) < 600
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [RUN_LOCK_FILE]  # no private files left
    lock.release()
    assert not (tmp_path / "run" / RUN_LOCK_FILE).exists()


def test_a_live_holder_refuses_the_second_writer_with_its_details(tmp_path):
    other = holder(job_id="777", job_label="777", user="alice", since=time.mktime((2026, 11, 22, 9, 30, 0, 0, 0, -1)))
    path = plant(tmp_path, other)
    before = path.read_bytes()
    with pytest.raises(RunDirectoryInUse) as refused:
        RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked).acquire()
    assert refused.value.exit_code == RUN_DIRECTORY_IN_USE_EXIT_CODE == 75
    assert str(refused.value).startswith(
        f"{tmp_path} is in use by alice's job 777 on {socket.gethostname()} "
        f"(pid {os.getpid()}, since 2026-11-22 09:30:00"
    )
    assert "; wait for it, cancel it, or use another run name" in str(refused.value)
    assert path.read_bytes() == before


def test_a_lock_of_a_process_gone_from_this_host_is_taken_over(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = process_start_time(child.pid)
    child.kill()
    child.wait()
    dead = holder(pid=child.pid, pid_started=started, job_id="55", job_label="55")
    plant(tmp_path, dead)
    lock = RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked)
    assert lock.acquire() == f"{dead.describe()} has ended"
    assert Holder.from_json((tmp_path / RUN_LOCK_FILE).read_text()).token == lock.me.token


def test_a_reused_pid_is_not_mistaken_for_the_holder(tmp_path):
    # Our own pid, but a start time that is not ours: the holder was an earlier process with this pid.
    plant(tmp_path, holder(pid_started="1"))
    assert RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked).acquire() is not None


def test_a_requeued_attempt_takes_over_from_its_own_job(tmp_path):
    earlier = holder(host="node-that-died", job_id="4242", job_label="4242")
    plant(tmp_path, earlier)
    me = holder(job_id="4242", job_label="4242")
    assert (
        RunDirectoryLock(tmp_path, me=me, job_is_live=never_asked).acquire()
        == f"an earlier attempt of this Slurm job ({earlier.describe()})"
    )


@pytest.mark.parametrize(
    "listed,taken",
    [(False, True), (True, False), (None, False)],
    ids=["squeue-no-longer-lists-it", "still-queued", "squeue-unavailable"],
)
def test_another_hosts_job_is_stale_only_when_squeue_says_it_has_ended(tmp_path, listed, taken):
    plant(tmp_path, holder(host="node7", job_id="900", job_label="900"))
    asked = []

    def job_is_live(job_id):
        asked.append(job_id)
        return listed

    lock = RunDirectoryLock(tmp_path, me=holder(job_id="901"), job_is_live=job_is_live)
    if taken:
        assert lock.acquire().endswith("has ended (squeue no longer lists it)")
    else:
        with pytest.raises(RunDirectoryInUse, match="job 900 on node7"):
            lock.acquire()
    assert asked == ["900"]


def test_another_hosts_process_outside_slurm_cannot_be_shown_dead(tmp_path):
    plant(tmp_path, holder(host="laptop", pid=1))
    with pytest.raises(RunDirectoryInUse, match=r"'s job on laptop \(pid 1, since"):
        RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked).acquire()


def test_an_unreadable_lock_is_stale_once_old_and_in_use_while_fresh(tmp_path):
    path = tmp_path / RUN_LOCK_FILE
    path.write_text("")  # a writer that died between creating the file and filling it
    with pytest.raises(RunDirectoryInUse, match="cannot be read"):
        RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked).acquire()
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    lock = RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked)
    assert "unreadable lock file" in lock.acquire() and Holder.from_json(path.read_text()).token == lock.me.token


def test_release_leaves_a_lock_that_is_no_longer_ours(tmp_path):
    lock = RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked)
    lock.acquire()
    successor = holder(job_id="31", token="someone-else")
    plant(tmp_path, successor)  # another job judged ours stale and took over
    lock.release()
    assert Holder.from_json((tmp_path / RUN_LOCK_FILE).read_text()) == successor


def test_other_ranks_tell_a_foreign_live_lock_from_their_own_jobs(tmp_path):
    rank1 = RunDirectoryLock(tmp_path, me=holder(job_id="10"), job_is_live=never_asked)
    assert not rank1.held_by_another_live_job()  # no lock at all
    plant(tmp_path, holder(job_id="10", pid=1))  # rank 0 of the same Slurm job
    assert not rank1.held_by_another_live_job()
    plant(tmp_path, holder(job_id="11"))  # another job, alive on this host
    assert rank1.held_by_another_live_job()
    torchrun = RunDirectoryLock(tmp_path, me=holder(process_group="run-a"), job_is_live=never_asked)
    plant(tmp_path, holder(process_group="run-a", pid=1))  # rank 0 of the same torchrun
    assert not torchrun.held_by_another_live_job()
    plant(tmp_path, holder(process_group="run-b"))
    assert torchrun.held_by_another_live_job()


def test_squeue_answers_are_read_as_listed_gone_or_unknown(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "squeue"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\ncase "$*" in\n  *" 1 "*) echo RUNNING ;;\n  *" 2 "*) ;;\n'
        '  *" 3 "*) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;\n'
        '  *) echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1 ;;\nesac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    assert [squeue_lists(job) for job in ("1", "2", "3", "4")] == [True, False, False, None]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert squeue_lists("1") is None


def test_other_ranks_wait_until_rank_zero_holds_the_lock(tmp_path):
    import threading

    rank1 = RunDirectoryLock(tmp_path, me=holder(job_id="10"), job_is_live=never_asked)
    plant(tmp_path, holder(job_id="11"))  # another job's
    assert rank1.wait_for_own_job(timeout_s=0.3, poll_s=0.05) is False
    later = threading.Timer(0.2, plant, (tmp_path, holder(job_id="10", pid=1)))  # rank 0 takes over
    later.start()
    assert rank1.wait_for_own_job(timeout_s=30, poll_s=0.05) is True
    later.join()
    alone = RunDirectoryLock(tmp_path, me=holder(), job_is_live=never_asked)  # neither Slurm nor torchrun
    assert alone.wait_for_own_job(timeout_s=30) is None


_STOPPED_WHILE_FAILING = """
import os, signal, sys, time
from nemo_launcher.jobs.common.report import print_error
from nemo_launcher.jobs.common.run_directory import claimed
from nemo_launcher.jobs.common.storage import StorageFault

def main():
    try:
        with claimed(sys.argv[1], rank=0):
            try:
                raise StorageFault("the disk is full")
            finally:  # srun or torchrun stops this rank because another one exited first with the same fault
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)
    except StorageFault as error:
        return print_error(error)

sys.exit(main())
"""


def test_a_stop_signal_during_an_orderly_exit_keeps_its_exit_code(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _STOPPED_WHILE_FAILING, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])),
    )
    assert (result.returncode, result.stderr) == (74, "Error: the disk is full\n")
    assert not (tmp_path / "run" / RUN_LOCK_FILE).exists()


_REFUSED_RANK_ZERO = """
import sys
from nemo_launcher.jobs.common import run_directory
from nemo_launcher.jobs.common.report import print_error
from nemo_launcher.jobs.common.run_lock import RunDirectoryInUse

run_directory.REFUSAL_GRACE_S = 2.0
try:
    with run_directory.claimed(sys.argv[1], rank=0, world_size=int(sys.argv[2])):
        pass
except RunDirectoryInUse as error:
    sys.exit(print_error(error))
"""


@pytest.mark.parametrize("world_size", ["1", "2"])
def test_a_refused_rank_zero_of_several_waits_for_the_others_handlers_and_keeps_75(tmp_path, world_size):
    """srun and torchrun SIGTERM the other ranks when rank 0 exits; one still starting would die of it (143), so a
    refused rank 0 that has company waits REFUSAL_GRACE_S first, and a SIGTERM meanwhile keeps its 75."""
    plant(tmp_path / "run", holder())  # this test process: alive, on this host
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _REFUSED_RANK_ZERO, str(tmp_path / "run"), world_size],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    if world_size == "2":
        time.sleep(1.0)
        child.send_signal(15)  # as srun does when another rank exits first
    _, err = child.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert child.returncode == RUN_DIRECTORY_IN_USE_EXIT_CODE, err
    assert err.startswith("Error: ") and "is in use by" in err
    assert (elapsed >= 2.0) if world_size == "2" else (elapsed < 2.0), elapsed
