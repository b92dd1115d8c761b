"""The pipeline ledger and `python3 -m nemo_launcher status|logs|cancel`, against scripted stand-ins for sbatch,
squeue, sacct, scontrol and scancel that record every call (the number of scheduler calls is part of the contract)."""

import glob
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_launcher.__main__ import main as commands
from nemo_launcher.launch import monitor
from nemo_launcher.launch.backends.slurm import SlurmBackend
from nemo_launcher.launch.errors import StageFailed
from nemo_launcher.launch.ledger import _git_commit, find_pipeline, live_jobs, open_ledger
from nemo_launcher.launch.pipeline import Plan, build_plan, submit_plan, write_plan
from nemo_launcher.launch.resolvers import REPO_ROOT

from .conftest import compose_config, plan_rows
from .test_interactive import _plan as interactive_plan

FAKE_COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "srun")


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """fake_slurm(name=sh body, ...) -> the calls file. Each fake appends `<name> <args>` to it, then runs its body
    with $n = how many times it has been called; sbatch prints 1001, 1002, ... unless told otherwise."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(SlurmBackend, "retry_delays", (0.0, 0.0, 0.0))

    def _install(**bodies):
        bodies = {"sbatch": 'echo "$((1000 + n))"', "srun": "echo 'usage: srun [--container-image=...]'", **bodies}
        for name in FAKE_COMMANDS:
            script = bin_dir / name
            script.write_text(
                f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nn=$(grep -c "^{name} " "{calls}")\n{bodies.get(name, "")}\n'
            )
            script.chmod(0o755)
        return calls

    return _install


def _calls(calls: Path, name: str):
    return [line for line in calls.read_text().splitlines() if line.startswith(f"{name} ")]


def _run(capsys, *argv):
    code = commands([str(word) for word in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _submitted(tmp_path, stages: int):
    """A pipeline of `stages` one-job stages submitted to the fake sbatch with a ledger: (results, record)."""
    results = tmp_path / "results"
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/tiny", f"base_results_dir={results}"])
    plan = build_plan(cfg, choices)
    plan = Plan(plan.context, plan.backend, plan.jobs_by_stage * stages)
    write_plan(plan, ["main.py"])
    ledger = open_ledger(plan, ["main.py"])
    submit_plan(plan, ledger)
    return results, json.loads(ledger.path.read_text())


def _write_record(results: Path, pipeline_id: str, created: str, jobs, cluster_type="bcm", **fields):
    """A ledger record written by hand, in the format open_ledger writes, for lookups and logs."""
    entries = []
    for stage, name, job_id in jobs:
        directory = results / name
        directory.mkdir(parents=True, exist_ok=True)
        entries.append(
            {
                "stage": stage,
                "job_name": f"nemo-megatron-{name}",
                "run_name": name,
                "directory": str(directory),
                "script": str(directory / "s.sh"),
                "script_sha256": "0" * 64,
                "configs": [],
                "job_id": job_id,
                "dependency": [],
                "array": None,
                "log_glob": glob.escape(str(directory / f"log-nemo-megatron-{name}_{job_id}")) + "_attempt*.out",
            }
        )
    record = {
        "id": pipeline_id,
        "created": created,
        "argv": ["main.py"],
        "cwd": "/",
        "user": "u",
        "host": "h",
        "cluster_type": cluster_type,
        "launcher_commit": None,
        "stages": [job[0] for job in jobs],
        "state": "submitted",
        "jobs": entries,
        **fields,
    }
    (results / ".ledger").mkdir(parents=True, exist_ok=True)
    (results / ".ledger" / f"{pipeline_id}.json").write_text(json.dumps(record))
    return record


def _head_commit():
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()


# ---- the record ----------------------------------------------------------------------------------------------


def test_submission_records_the_pipeline(fake_slurm, launch, tmp_path):
    fake_slurm()
    results = tmp_path / "results"
    before = _head_commit()
    code, out, err = launch(
        ["stages=[training,conversion,evaluation]", "training=gpt3/tiny"], debug=False, results=results
    )
    assert code == 0, err
    (path,) = (results / ".ledger").glob("*.json")
    record = json.loads(path.read_text())
    assert re.fullmatch(r"\d{8}-\d{6}-gpt3_tiny-[0-9a-f]{4}", record["id"]) and path.name == f"{record['id']}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert record["state"] == "submitted" and record["cluster_type"] == "bcm"
    assert record["stages"] == ["training", "conversion", "evaluation"]
    assert record["argv"][:2] == ["main.py", f"base_results_dir={results}"] and record["cwd"] == os.getcwd()
    assert record["launcher_commit"] in (before, _head_commit())
    jobs = record["jobs"]
    assert [job["job_id"] for job in jobs] == ["1001", "1002", "1003"]
    assert [job["dependency"] for job in jobs] == [["singleton"], ["afterok:1001"], ["afterok:1002", "singleton"]]
    for job in jobs:
        assert hashlib.sha256(Path(job["script"]).read_bytes()).hexdigest() == job["script_sha256"]
        assert job["configs"] and all(
            hashlib.sha256(Path(config["path"]).read_bytes()).hexdigest() == config["sha256"]
            for config in job["configs"]
        )
    # The glob finds the log names the script writes, every attempt of them, and nothing of another job.
    training = Path(jobs[0]["directory"])
    logs = [training / f"log-{jobs[0]['job_name']}_1001_attempt{n}.out" for n in (0, 1)]
    for log in logs + [training / f"log-{jobs[0]['job_name']}_999_attempt0.out"]:
        log.write_text("x")
    assert sorted(glob.glob(jobs[0]["log_glob"])) == [str(log) for log in logs]
    for command in ("status", "logs", "cancel"):
        assert f"python3 -m nemo_launcher {command} {record['id']}" in out
    assert f"--results {results}" in out


def test_rollback_is_recorded(fake_slurm, launch, tmp_path):
    calls = fake_slurm(
        sbatch=(
            'if [ "$n" -ge 3 ]; then echo "sbatch: error: Batch job submission failed" >&2; exit 1; fi; '
            'echo "$((1000 + n))"'
        )
    )
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[training,conversion,evaluation]", "training=gpt3/tiny"], debug=False, results=results
    )
    assert code == 3, err
    (path,) = (results / ".ledger").glob("*.json")
    record = json.loads(path.read_text())
    assert record["state"] == "rolled_back"
    assert [job["job_id"] for job in record["jobs"]] == ["1001", "1002", None]
    assert _calls(calls, "scancel") == ["scancel 1001 1002"]


def test_dry_run_writes_no_ledger(launch, tmp_path):
    code, out, err = launch(["stages=[training]", "training=gpt3/tiny"], results=tmp_path / "results")
    assert code == 0, err
    assert not (tmp_path / "results" / ".ledger").exists()
    assert "nemo_launcher status" not in out


def test_commit_is_read_from_the_git_files(tmp_path):
    sha = "ab" * 20
    packed = tmp_path / "packed"
    (packed / ".git").mkdir(parents=True)
    (packed / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (packed / ".git" / "packed-refs").write_text(
        f"# pack-refs with: peeled\n{'cd' * 20} refs/heads/other\n{sha} refs/heads/main\n"
    )
    assert _git_commit(packed) == sha
    loose = tmp_path / "loose"
    (loose / ".git" / "refs" / "heads").mkdir(parents=True)
    (loose / ".git" / "HEAD").write_text("ref: refs/heads/dev\n")
    (loose / ".git" / "refs" / "heads" / "dev").write_text(f"{sha}\n")
    assert _git_commit(loose) == sha
    (tmp_path / "plain").mkdir()
    assert _git_commit(tmp_path / "plain") is None


# ---- status on Slurm: one squeue, one sacct (or scontrol) whatever the size ------------------------------------


@pytest.mark.parametrize("stages", [3, 7])
def test_status_asks_slurm_once_per_kind_of_query(stages, fake_slurm, tmp_path, capsys):
    ended = [str(1001 + i) for i in range(stages - 2)]
    running, pending = str(1000 + stages - 1), str(1000 + stages)
    sacct_lines = "".join(f"{job_id}|COMPLETED|0:0|00:00:0{i}\\n" for i, job_id in enumerate(ended))
    calls = fake_slurm(
        squeue=f"printf '{running}|RUNNING|1:02|None\\n{pending}|PENDING|0:00|Dependency\\n'",
        sacct=f"printf '{sacct_lines}'",
    )
    results, record = _submitted(tmp_path, stages)
    calls.write_text("")
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    all_ids = [str(1001 + i) for i in range(stages)]
    (squeue,) = _calls(calls, "squeue")
    (sacct,) = _calls(calls, "sacct")
    assert f"-j {','.join(all_ids)} " in squeue
    assert f"-j {','.join(ended)} " in sacct
    assert not _calls(calls, "scontrol")
    rows = {line.split()[2]: line.split() for line in out.splitlines()[2:]}
    assert [rows[job_id][3:5] for job_id in ended] == [["COMPLETED", "exit"]] * len(ended)
    assert rows[running][3:5] == ["RUNNING", "1:02"] and rows[pending][3:5] == ["PENDING", "(Dependency)"]
    assert f"{stages - 2} COMPLETED, 1 RUNNING, 1 PENDING" in out.splitlines()[0]


def test_status_without_accounting_asks_scontrol_once(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(
        squeue="echo '1003|RUNNING|0:05|None'",
        sacct='echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
        scontrol="echo 'JobId=77 JobName=other JobState=FAILED ExitCode=1:0 RunTime=00:00:01'; "
        "echo 'JobId=1001 JobName=nemo-megatron-gpt3_tiny UserId=u(1) JobState=COMPLETED Reason=None "
        "ExitCode=0:0 RunTime=00:00:03'",
    )
    results, record = _submitted(tmp_path, 3)
    calls.write_text("")
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert len(_calls(calls, "squeue")) == 1 and len(_calls(calls, "sacct")) == 1
    assert _calls(calls, "scontrol") == ["scontrol show job -o"]
    rows = {line.split()[2]: line for line in out.splitlines()[2:]}
    assert re.search(r"COMPLETED +exit 0", rows["1001"])
    assert "ENDED (state unknown: no accounting)" in rows["1002"]
    assert "RUNNING" in rows["1003"]


def test_status_lists_recent_pipelines_with_one_query(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(
        squeue="echo '2002|RUNNING|0:05|None'",
        sacct="printf '2001|COMPLETED|0:0|00:00:03\\n1001|FAILED|2:0|00:00:01\\n'",
    )
    results = tmp_path / "results"
    for i in range(21):  # old, and beyond the 20 shown
        _write_record(
            results, f"20250101-0000{i:02d}-old-0000", f"2025-01-01T00:00:{i:02d}+00:00", [("training", "old", None)]
        )
    _write_record(
        results,
        "20260101-000000-a-1111",
        "2026-01-01T00:00:00+00:00",
        [("training", "a", "1001"), ("conversion", "a_conv", "1002")],
    )
    _write_record(
        results,
        "20260102-000000-b-2222",
        "2026-01-02T00:00:00+00:00",
        [("training", "b", "2001"), ("conversion", "b_conv", "2002")],
    )
    code, out, err = _run(capsys, "status", "--results", results)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 21  # a header and the 20 newest
    assert lines[1].startswith("20260102-000000-b-2222") and "1 COMPLETED, 1 RUNNING" in lines[1]
    assert lines[2].startswith("20260101-000000-a-1111") and "FAILED at training" in lines[2]
    assert len(_calls(calls, "squeue")) == 1 and len(_calls(calls, "sacct")) == 1


def test_array_tasks_are_counted_once_across_squeue_and_scontrol(fake_slurm, tmp_path, capsys):
    # Pending tasks come as one range; scontrol repeats the running and pending ones squeue already listed.
    calls = fake_slurm(
        squeue="printf '500_1|RUNNING|0:03|None\\n500_[2-5%%2]|PENDING|0:00|JobArrayTaskLimit\\n'",
        sacct='echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
        scontrol="echo 'JobId=501 ArrayJobId=500 ArrayTaskId=0 JobState=COMPLETED ExitCode=0:0 RunTime=00:00:02'; "
        "echo 'JobId=502 ArrayJobId=500 ArrayTaskId=1 JobState=RUNNING ExitCode=0:0 RunTime=00:00:03'; "
        "echo 'JobId=500 ArrayJobId=500 ArrayTaskId=2-5%2 JobState=PENDING ExitCode=0:0 RunTime=00:00:00'",
    )
    results = tmp_path / "results"
    record = _write_record(
        results, "20260101-000000-p-aaaa", "2026-01-01T00:00:00+00:00", [("data_preparation", "p", "500")]
    )
    record["jobs"][0]["array"] = "0-5%2"
    (results / ".ledger" / f"{record['id']}.json").write_text(json.dumps(record))
    code, out, err = _run(capsys, "status", "p", "--results", results)
    assert code == 0, err
    assert re.search(r"500 +1 RUNNING, 4 PENDING, 1 COMPLETED +6 tasks", out)
    assert len(_calls(calls, "squeue")) == 1 and len(_calls(calls, "scontrol")) == 1


# ---- finding RUN ---------------------------------------------------------------------------------------------


def test_run_is_found_by_id_prefix_run_name_or_job_name(tmp_path, capsys):
    results = tmp_path / "results"
    _write_record(results, "20260101-000000-gpt3_5b-aaaa", "2026-01-01T00:00:00+00:00", [("training", "gpt3_5b", "1")])
    _write_record(
        results,
        "20260301-000000-gpt3_5b-bbbb",
        "2026-03-01T00:00:00+00:00",
        [("training", "gpt3_5b", "2"), ("evaluation", "eval_all", "3")],
    )
    assert find_pipeline(results, "20260101-000000-gpt3_5b-aaaa")["id"].endswith("aaaa")
    assert find_pipeline(results, "20260101")["id"].endswith("aaaa")
    assert find_pipeline(results, "gpt3_5b")["id"].endswith("bbbb")  # the newest of that run
    assert find_pipeline(results, "nemo-megatron-eval_all")["id"].endswith("bbbb")
    code, out, err = _run(capsys, "status", "2026", "--results", results)
    assert code == 2 and "matches 2 pipelines" in err
    code, out, err = _run(capsys, "logs", "gpt3_6b", "--results", results)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("Error: RUN='gpt3_6b'") and str(results / ".ledger") in err and "gpt3_5b, eval_all" in err


def test_results_directory_comes_from_the_environment(tmp_path):
    results = tmp_path / "elsewhere"
    _write_record(results, "20260101-000000-x-aaaa", "2026-01-01T00:00:00+00:00", [("training", "x", None)])
    # A fresh process: the commands must answer without importing Hydra or torch.
    probe = (
        "import sys; from nemo_launcher.__main__ import main; code = main(['status', 'x']); "
        "assert 'hydra' not in sys.modules and 'torch' not in sys.modules, 'heavy import'; sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, NEMO_LAUNCHER_RESULTS=str(results)),
    )
    assert result.returncode == 0, result.stderr
    assert "20260101-000000-x-aaaa" in result.stdout and "NOT SUBMITTED" in result.stdout


# ---- logs ----------------------------------------------------------------------------------------------------


def _log(path: Path, text: str, mtime: float) -> Path:
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def test_logs_prints_the_newest_attempt(tmp_path, capsys):
    results = tmp_path / "results"
    record = _write_record(
        results,
        "20260101-000000-a-aaaa",
        "2026-01-01T00:00:00+00:00",
        [("training", "a", "11"), ("conversion", "b", "12")],
    )
    train, convert = (Path(job["directory"]) for job in record["jobs"])
    # Attempt numbers beat modification times (a copied-back older attempt must not win), and compare as numbers.
    _log(train / "log-nemo-megatron-a_11_attempt10.out", "attempt ten\n", 1000)
    _log(train / "log-nemo-megatron-a_11_attempt2.out", "attempt two\n", 3000)
    _log(train / "log-nemo-megatron-a_11_attempt0.out", "attempt zero\n", 4000)
    _log(convert / "log-nemo-megatron-b_12_attempt0.out", "conversion\n", 2000)
    code, out, err = _run(capsys, "logs", "a", "training", "--results", results)
    assert code == 0 and out == "attempt ten\n"
    assert str(train / "log-nemo-megatron-a_11_attempt10.out") in err
    # Without STAGE: the job whose log was written last.
    code, out, err = _run(capsys, "logs", "a", "--results", results)
    assert code == 0 and out == "attempt ten\n"
    _log(convert / "log-nemo-megatron-b_12_attempt0.out", "conversion\n", 5000)
    code, out, err = _run(capsys, "logs", "a", "--results", results)
    assert code == 0 and out == "conversion\n"
    code, out, err = _run(capsys, "logs", "a", "export", "--results", results)
    assert code == 2 and "training, conversion" in err


def test_logs_follow_until_the_job_ends(fake_slurm, tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    record = _write_record(results, "20260101-000000-a-aaaa", "2026-01-01T00:00:00+00:00", [("training", "a", "11")])
    log = Path(record["jobs"][0]["directory"]) / "log-nemo-megatron-a_11_attempt0.out"
    log.write_text("step 1\n")
    # Listed as running twice, writing a line meanwhile; then gone from the queue.
    calls = fake_slurm(
        squeue=f'if [ "$n" -le 2 ]; then echo "step $((n + 1))" >> "{log}"; echo "11|RUNNING|0:0$n|None"; fi'
    )
    monkeypatch.setattr(monitor, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(monitor, "READ_SECONDS", 0.01)
    code, out, err = _run(capsys, "logs", "a", "-f", "--results", results)
    assert code == 0, err
    assert out == "step 1\nstep 2\nstep 3\n"
    assert len(_calls(calls, "squeue")) == 3


def test_logs_follow_stops_cleanly_on_ctrl_c(tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    record = _write_record(results, "20260101-000000-a-aaaa", "2026-01-01T00:00:00+00:00", [("training", "a", "11")])
    (Path(record["jobs"][0]["directory"]) / "log-nemo-megatron-a_11_attempt0.out").write_text("hello\n")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(monitor, "_is_live", interrupted)
    code, out, err = _run(capsys, "logs", "a", "-f", "--results", results)
    assert code == 0 and out == "hello\n"


# ---- cancel --------------------------------------------------------------------------------------------------


def test_cancel_makes_one_scancel_call_with_the_live_ids(fake_slurm, tmp_path, capsys):
    calls = fake_slurm(squeue="printf '1002|RUNNING|0:05|None\\n1003|PENDING|0:00|Dependency\\n'")
    results, record = _submitted(tmp_path, 3)
    calls.write_text("")
    assert [(job["job_id"], state) for job, state in live_jobs([record])] == [("1002", "RUNNING"), ("1003", "PENDING")]
    code, out, err = _run(capsys, "cancel", record["id"], "--results", results)
    assert code == 0, err
    # One for live_jobs above; cancel asks for the recorded ids, then for the jobs carrying the pipeline's tags.
    assert len(_calls(calls, "squeue")) == 3
    assert _calls(calls, "scancel") == ["scancel 1002 1003"]
    assert re.match(r"cancelled +training +nemo-megatron-gpt3_tiny +1002 +was RUNNING$", out.splitlines()[2])
    assert re.match(r"cancelled +training +nemo-megatron-gpt3_tiny +1003 +was PENDING$", out.splitlines()[3])
    assert re.match(r"already ended +training +nemo-megatron-gpt3_tiny +1001$", out.splitlines()[4])


# ---- pipelines run here --------------------------------------------------------------------------------------


def test_interactive_status_from_exit_codes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan, _ = interactive_plan(tmp_path, [0, 3, 0])
    write_plan(plan, ["main.py"])
    ledger = open_ledger(plan, ["main.py"])
    with pytest.raises(StageFailed):
        submit_plan(plan, ledger)
    capsys.readouterr()
    results = tmp_path / "r"
    record = json.loads(ledger.path.read_text())
    assert record["state"] == "failed" and record["cluster_type"] == "interactive"
    assert [job["exit_code"] for job in record["jobs"]] == [0, 3, None]
    assert record["jobs"][1]["started"] and record["jobs"][1]["ended"] and record["jobs"][1]["pid"] == os.getpid()
    assert record["jobs"][2]["started"] is None
    code, out, err = _run(capsys, "status", record["id"], "--results", results)
    assert code == 0, err
    assert out.splitlines()[0].endswith("FAILED at s1")
    states = [line.split()[2:4] for line in out.splitlines()[2:]]
    assert states == [["COMPLETED", "exit"], ["FAILED", "exit"], ["NOT", "RUN"]]
    assert "exit 3" in out.splitlines()[3]
    # A later run of the same job directory writes a log matching the same glob: it is not this pipeline's.
    _log(Path(record["jobs"][0]["directory"]) / "log-s0_20990101_000000_1.out", "a later run\n", time.time() + 3600)
    code, out, err = _run(capsys, "logs", record["id"], "s0", "--results", results)
    assert code == 0 and "probe s0" in out


def test_interactive_running_and_interrupted(tmp_path, capsys):
    results = tmp_path / "results"
    gone = subprocess.Popen(["true"])
    gone.wait()
    jobs = [("s0", "a", None), ("s1", "b", None), ("s2", "c", None)]
    record = _write_record(
        results,
        "20260101-000000-a-aaaa",
        "2026-01-01T00:00:00+00:00",
        jobs,
        cluster_type="interactive",
        host=os.uname().nodename,
        state="running",
    )
    for entry, started in zip(record["jobs"], ["2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00", None]):
        entry.update(exit_code=None, started=started, ended=None, pid=os.getpid())
    record["jobs"][0].update(exit_code=0, ended="2026-01-01T00:00:01+00:00")
    path = results / ".ledger" / f"{record['id']}.json"
    path.write_text(json.dumps(record))
    assert [(job["run_name"], state) for job, state in live_jobs([record])] == [("b", "RUNNING"), ("c", "PENDING")]
    code, out, err = _run(capsys, "status", "a", "--results", results)
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["COMPLETED", "RUNNING", "PENDING"]
    for entry in record["jobs"]:
        entry["pid"] = gone.pid  # the launcher died without recording an exit code
    path.write_text(json.dumps(record))
    assert live_jobs([record]) == []
    code, out, err = _run(capsys, "status", "a", "--results", results)
    assert code == 0, err
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["COMPLETED", "INTERRUPTED", "NOT"]
    assert out.splitlines()[0].endswith("INTERRUPTED at s1")


def test_cancel_stops_a_pipeline_running_here(tmp_path, capsys):
    results = tmp_path / "results"
    # Stands in for a launcher started from a terminal: it leads its own process group, its job is a child.
    launcher = subprocess.Popen(["bash", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        record = _write_record(
            results,
            "20260101-000000-a-aaaa",
            "2026-01-01T00:00:00+00:00",
            [("s0", "a", None), ("s1", "b", None)],
            cluster_type="interactive",
            host=os.uname().nodename,
        )
        for entry, started in zip(record["jobs"], ["2026-01-01T00:00:00+00:00", None]):
            entry.update(exit_code=None, started=started, ended=None, pid=launcher.pid)
        (results / ".ledger" / f"{record['id']}.json").write_text(json.dumps(record))
        code, out, err = _run(capsys, "cancel", "a", "--results", results)
        assert code == 0, err
        assert launcher.wait(timeout=20) == -15
        assert re.search(r"cancelled +s0 +nemo-megatron-a +- +was RUNNING", out)
        assert re.search(r"cancelled +s1 +nemo-megatron-b +- +was PENDING", out)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, 9)


# ---- the plan table ------------------------------------------------------------------------------------------


def test_plan_table_columns(launch, tmp_path):
    code, out, err = launch(
        ["stages=[data_preparation,training]", "data_preparation=gpt3/download_gpt3_pile"], results=tmp_path / "a"
    )
    assert code == 0, err
    rows = plan_rows(out)
    # stage, job, id, dependency, nodes, gpus/node, time, array, script, log
    assert rows[0][4:8] == ["1", "-", "4:00:00", "30"]
    assert rows[3][4:8] == ["16", "8", "6-00:00:00", "-"]
    for cluster_type, overrides in (
        # 5B on two GPUs needs more memory than they have (predictions.py); the table is what is checked here.
        ("interactive", ["training.trainer.num_nodes=1", "training.trainer.devices=2", "memory_check=false"]),
        ("bcp", []),
    ):
        code, out, err = launch(
            ["stages=[training]", "training=gpt3/5b", f"cluster_type={cluster_type}", *overrides],
            results=tmp_path / cluster_type,
        )
        assert code == 0, err
        header = out.split("Pipeline, ", 1)[1].splitlines()[1].split()
        assert header == ["stage", "job", "nodes", "gpus/node", "time", "array", "script", "log"]
        assert plan_rows(out)[0][2:6] == (
            ["1", "2", "6-00:00:00", "-"] if cluster_type == "interactive" else ["16", "8", "6-00:00:00", "-"]
        )
        assert "DRYRUN" not in out
