"""`status`, `logs` and `cancel` on a real Slurm (the project's local cluster in CI, where accounting is off, so
ended jobs are read from `scontrol`): a 3-stage probe pipeline recorded in the ledger, followed, then cancelled."""

import json
import re
import time
from datetime import timedelta
from pathlib import Path

from nemo_launcher.__main__ import main as commands
from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.ledger import open_ledger
from nemo_launcher.launch.pipeline import Plan, PlannedJob, build_plan, submit_plan, write_plan

from .conftest import compose_config

PROBE = "tests.launch.slurm_probe"


def _probe_pipeline(tmp_path: Path):
    """a (done at once) -> b (prints a line, then sleeps for minutes) -> c: one job per stage."""
    results = tmp_path / "results"
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/tiny", f"base_results_dir={results}"])
    backend = build_plan(cfg, choices).backend
    record = str(tmp_path / "record.txt")
    commands_by_stage = {
        "a": (Command(PROBE, ("--record", record, "--name", "a")),),
        "b": (
            Command(PROBE, ("--record", record, "--name", "b")),
            Command(PROBE, ("--record", record, "--name", "b-wait", "--sleep", "300")),
        ),
        "c": (Command(PROBE, ("--record", record, "--name", "c")),),
    }
    stages = []
    for name, probe_commands in commands_by_stage.items():
        spec = JobSpec(
            stage=name,
            name=f"probe_{name}",
            directory=results / name,
            commands=probe_commands,
            time_limit=timedelta(minutes=10),
            uses_gpus=False,
        )
        stages.append([PlannedJob(spec, backend.script_path(spec), backend.render(spec))])
    return Plan(backend.context, backend, stages), results


def _command(capsys, *argv):
    code = commands([str(word) for word in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err


def _states(out: str):
    """job id -> state column of `status RUN`."""
    return {line.split()[2]: line.split()[3] for line in out.splitlines()[2:]}


def test_status_logs_and_cancel_follow_a_real_pipeline(slurm_cluster, tmp_path, capsys):
    plan, results = _probe_pipeline(tmp_path)
    write_plan(plan, ["main.py"])
    ledger = open_ledger(plan, ["main.py"])
    a, b, c = (entry.job_id for entry in submit_plan(plan, ledger))
    record = json.loads(ledger.path.read_text())
    assert record["state"] == "submitted" and [job["job_id"] for job in record["jobs"]] == [a, b, c]
    assert slurm_cluster.wait(a, timeout_s=120) == "COMPLETED"

    # b runs once a node is free (other tests share the cluster); its log has the probe's first line by then.
    deadline = time.monotonic() + 180
    while True:
        out, _ = _command(capsys, "status", ledger.id, "--results", results)
        b_log = list((results / "b").glob(f"log-*_{b}_attempt0.out"))
        if _states(out)[b] == "RUNNING" and b_log and "probe b" in b_log[0].read_text():
            break
        assert time.monotonic() < deadline, f"job {b} did not start within 180 s:\n{out}"
        time.sleep(1)
    assert _states(out) == {a: "COMPLETED", b: "RUNNING", c: "PENDING"}
    assert re.search(rf"{c} +PENDING +\(Dependency\)", out)
    assert "1 COMPLETED, 1 RUNNING, 1 PENDING" in out.splitlines()[0]

    out, err = _command(capsys, "logs", "probe_b", "--results", results)  # by run name; the job active last
    assert f"probe b attempt 0 job {b}" in out and str(b_log[0]) in err

    out, _ = _command(capsys, "cancel", ledger.id, "--results", results)
    assert re.search(rf"cancelled +b +\S+ +{b} +was RUNNING", out)
    assert re.search(rf"cancelled +c +\S+ +{c} +was PENDING", out)
    assert re.search(rf"already ended +a +\S+ +{a}", out)
    assert [slurm_cluster.wait(job, timeout_s=120) for job in (b, c)] == ["CANCELLED", "CANCELLED"]

    out, _ = _command(capsys, "status", ledger.id, "--results", results)
    assert _states(out) == {a: "COMPLETED", b: "CANCELLED", c: "CANCELLED"}
    assert out.splitlines()[0].endswith("CANCELLED at b")
    assert re.search(rf"{b} +CANCELLED +signal 15 ", out) and re.search(rf"{c} +CANCELLED +- ", out)  # c never ran
    out, _ = _command(capsys, "status", "--results", results)
    assert re.search(rf"^{ledger.id} +a,b,c +CANCELLED at b ", out, re.MULTILINE)
