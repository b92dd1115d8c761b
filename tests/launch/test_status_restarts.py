"""`status`'s restarts column: how often Slurm restarted each job and why, from one squeue (RestartCnt) and one
`sacct --duplicates` (each attempt's state), or scontrol's Restarts= and the attempts' own logs where accounting is
disabled; "-" where nothing says. Against the scripted scheduler stand-ins of test_ledger.py, which record every call.
"""

import json
import re

from nemo_launcher.contract.stop_reasons import (
    max_time_stop_reason,
    restart_cause,
    signal_stop_reason,
    stopped_title,
)

from .test_ledger import _calls, _run, _write_record
from .test_ledger import fake_slurm as fake_slurm  # noqa: F401 - the fixture, shared with the ledger's tests

NO_ACCOUNTING = 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1'
FOLLOW_UP = "the next attempt resumes from its checkpoint"


def _pipeline(tmp_path, jobs):
    """A Slurm pipeline record of (stage, run name, job id) jobs: (results folder, record)."""
    results = tmp_path / "results"
    record = _write_record(results, "20260101-000000-r-aaaa", "2026-01-01T00:00:00+00:00", jobs)
    return results, record


def _attempt_log(results, name, job_id, attempt, text):
    """An attempt's log where the Slurm script writes it."""
    (results / name / f"log-nemo-megatron-{name}_{job_id}_attempt{attempt}.out").write_text(text)


def _stopped_by(reason: str) -> str:
    """The end of the log of an attempt that stopped early, as the trainer writes it."""
    return f"step=40/1000 loss=7.1\n{stopped_title(40, 1000, reason, FOLLOW_UP)}\n  steps        40 this attempt\n"


def _restarts(out: str) -> dict[str, str]:
    """job id -> its restarts cell (the table's sixth column: cells are separated by two spaces or more)."""
    cells = [re.split(r"\s{2,}", line) for line in out.splitlines()[2:]]
    return {row[2]: row[5] for row in cells}


def test_causes_come_from_each_earlier_attempts_accounting_state_and_its_own_log(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(
        squeue="printf '1001|RUNNING|0:05|None|2\\n1003|RUNNING|0:01|None|0\\n'",
        # Each attempt with the time it was queued, listed out of order: the causes still come oldest first.
        sacct="printf '1001|RUNNING|0:0|00:00:05|2026-01-01T02:00:00\\n"
        "1001|NODE_FAIL|0:0|00:10:00|2026-01-01T00:00:00\\n1001|REQUEUED|0:0|00:20:00|2026-01-01T01:00:00\\n"
        "1002|PREEMPTED|0:0|00:01:00|2026-01-01T00:00:00\\n1002|COMPLETED|0:0|00:03:00|2026-01-01T00:01:00\\n'",
    )
    results, record = _pipeline(
        tmp_path, [("training", "train", "1001"), ("conversion", "conv", "1002"), ("evaluation", "eval", "1003")]
    )
    # The attempt sacct calls REQUEUED says why in its log: the time-limit warning (SIGUSR1).
    _attempt_log(results, "train", "1001", 0, "step=1/1000 loss=9.0\n")  # cut short by the node failure
    _attempt_log(results, "train", "1001", 1, _stopped_by(signal_stop_reason("SIGUSR1")))
    _attempt_log(results, "train", "1001", 2, "step=41/1000 loss=7.0\n")
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert _restarts(out) == {"1001": "2 (node failure, time limit)", "1002": "1 (preemption)", "1003": "0"}
    assert out.splitlines()[1].split() == ["stage", "job", "id", "state", "elapsed/exit", "restarts", "log"]
    # One squeue for all; one sacct for the ended job and the restarted one, every attempt of each.
    (squeue,) = _calls(calls, "squeue")
    (sacct,) = _calls(calls, "sacct")
    assert "RestartCnt" in squeue and "-j 1001,1002,1003 " in squeue
    assert "--duplicates" in sacct and "-j 1002,1001 " in sacct
    assert re.search(r"1002 +COMPLETED +exit 0 +1 \(preemption\)", out), out


def test_without_accounting_the_count_is_the_schedulers_and_the_cause_the_attempts_log(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(
        squeue="echo '1001|PENDING|0:00|BeginTime|2'",
        sacct=NO_ACCOUNTING,
        scontrol="echo 'JobId=1002 JobName=nemo-megatron-conv JobState=COMPLETED Restarts=1 ExitCode=0:0 "
        "RunTime=00:00:03'",
    )
    results, record = _pipeline(
        tmp_path, [("training", "train", "1001"), ("conversion", "conv", "1002"), ("evaluation", "eval", "1003")]
    )
    _attempt_log(results, "train", "1001", 0, _stopped_by(signal_stop_reason("SIGUSR1")))
    _attempt_log(results, "train", "1001", 1, _stopped_by(max_time_stop_reason("00:04:00:00")))
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    # 1002 restarted once and left no log that says why; 1003 is known to no one: no count is guessed.
    assert _restarts(out) == {"1001": "2 (time limit, max_time)", "1002": "1 (unknown)", "1003": "-"}
    assert len(_calls(calls, "squeue")) == 1 and len(_calls(calls, "sacct")) == 1
    assert _calls(calls, "scontrol") == ["scontrol show job -o"]


def test_a_restarted_job_squeue_lists_costs_no_scontrol_call_without_accounting(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(squeue="echo '1001|RUNNING|0:05|None|1'", sacct=NO_ACCOUNTING)
    results, record = _pipeline(tmp_path, [("training", "train", "1001")])
    _attempt_log(results, "train", "1001", 0, _stopped_by(signal_stop_reason("SIGTERM")))
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert _restarts(out) == {"1001": "1 (SIGTERM)"}
    assert not _calls(calls, "scontrol")


def test_a_job_that_never_restarted_asks_nothing_beyond_squeue(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(squeue="echo '1001|RUNNING|0:05|None|0'")
    results, record = _pipeline(tmp_path, [("training", "train", "1001")])
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert _restarts(out) == {"1001": "0"}
    assert len(_calls(calls, "squeue")) == 1 and not _calls(calls, "sacct") and not _calls(calls, "scontrol")


def test_an_array_adds_up_its_tasks_restarts(fake_slurm, tmp_path, capsys):
    fake_slurm(
        squeue="printf '500_1|RUNNING|0:03|None|1\\n500_[2-3]|PENDING|0:00|JobArrayTaskLimit|0\\n'",
        sacct="printf '500_0|COMPLETED|0:0|00:00:02\\n500_1|NODE_FAIL|0:0|00:00:09\\n500_1|RUNNING|0:0|00:00:03\\n'",
    )
    results, record = _pipeline(tmp_path, [("data_preparation", "prep", "500")])
    record["jobs"][0]["array"] = "0-3"
    (results / ".ledger" / f"{record['id']}.json").write_text(json.dumps(record))
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert re.search(r"500 +1 RUNNING, 2 PENDING, 1 COMPLETED +4 tasks +1 \(node failure\)", out), out


def test_the_cause_read_back_is_the_one_the_trainer_wrote():
    def cause(reason):
        return restart_cause(_stopped_by(reason))

    assert cause(signal_stop_reason("SIGUSR1")) == "time limit"
    assert cause(signal_stop_reason("SIGTERM")) == "SIGTERM"
    assert cause(signal_stop_reason("on another rank")) == "signal"
    assert cause(max_time_stop_reason("00:04:00:00")) == "max_time"
    assert restart_cause("step=3/10 loss=7.0\nTraceback (most recent call last):\n") is None
    # A resumed attempt's log may hold an earlier summary's words; the last title is the attempt's own.
    both = _stopped_by(signal_stop_reason("SIGTERM")) + _stopped_by(signal_stop_reason("SIGUSR1"))
    assert restart_cause(both) == "time limit"
