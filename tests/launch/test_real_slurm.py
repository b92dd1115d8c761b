"""Real pipelines on a real Slurm (the project's local cluster in CI): order, afterok chaining, cancellation of
downstream jobs after a failure, atomic rollback and per-attempt logs."""

from datetime import timedelta
from pathlib import Path

import pytest

from nemo_launcher.launch.errors import SubmissionError
from nemo_launcher.launch.job_spec import Command, Dependency, JobSpec, Wait
from nemo_launcher.launch.pipeline import Plan, PlannedJob, submit_plan, write_plan

from .conftest import compose_config


def _plan(tmp_path: Path, steps):
    """steps: [(name, sleep, exit code, extra JobSpec fields)] -> a plan with one stage per step."""
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/tiny", f"base_results_dir={tmp_path}/results"])
    from nemo_launcher.launch.pipeline import build_plan

    backend = build_plan(cfg, choices).backend
    record = tmp_path / "record.txt"
    stages = []
    for name, sleep, code, extra in steps:
        spec = JobSpec(
            stage=name,
            name=f"probe_{name}",
            directory=tmp_path / "results" / name,
            commands=(
                Command(
                    "tests.launch.slurm_probe",
                    ("--record", str(record), "--name", name, "--sleep", str(sleep), "--exit", str(code)),
                ),
            ),
            time_limit=timedelta(minutes=5),
            tasks_per_node=1,
            uses_gpus=False,
            **extra,
        )
        stages.append([PlannedJob(spec, backend.script_path(spec), backend.render(spec))])
    return Plan(backend.context, backend, stages), record


def _wait_ended(slurm_cluster, job_ids, timeout_s=90):
    return [slurm_cluster.wait(job_id, timeout_s) for job_id in job_ids]


def test_stages_run_in_order_with_afterok(slurm_cluster, tmp_path):
    plan, record = _plan(tmp_path, [("a", 1, 0, {}), ("b", 0, 0, {}), ("c", 0, 0, {})])
    write_plan(plan, ["main.py"])
    submitted = submit_plan(plan)
    ids = [entry.job_id for entry in submitted]
    # The pipeline binds the job before as data; the backend says it in Slurm's words.
    assert submitted[1].waits == (Wait(Dependency.AFTER_SUCCESS, (ids[0],)),)
    assert plan.backend.dependency_words(submitted[2].waits) == [f"afterok:{ids[1]}"]
    assert _wait_ended(slurm_cluster, ids) == ["COMPLETED"] * 3
    rows = [line.split() for line in record.read_text().splitlines()]
    assert [row[0] for row in rows] == ["a", "b", "c"]
    assert float(rows[1][1]) >= float(rows[0][2]) and float(rows[2][1]) >= float(rows[1][2])


def test_failure_in_stage_two_leaves_nothing_pending(slurm_cluster, tmp_path):
    plan, record = _plan(tmp_path, [("a", 0, 0, {}), ("b", 0, 3, {}), ("c", 0, 0, {})])
    write_plan(plan, ["main.py"])
    ids = [entry.job_id for entry in submit_plan(plan)]
    assert _wait_ended(slurm_cluster, ids[:2]) == ["COMPLETED", "FAILED"]
    # Slurm notices the dependency can never be met on its next scheduling pass.
    assert slurm_cluster.wait(ids[2], timeout_s=60) == "CANCELLED"
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["a", "b"]


def test_failed_submission_rolls_back_real_jobs(slurm_cluster, tmp_path):
    # 5 nodes is more than the cluster has: sbatch refuses it at submit time (EnforcePartLimits=ALL).
    plan, record = _plan(tmp_path, [("a", 30, 0, {}), ("b", 0, 0, {}), ("c", 0, 0, {"nodes": 5})])
    write_plan(plan, ["main.py"])
    with pytest.raises(SubmissionError, match="stage 'c'.*cancelled the jobs already submitted") as error:
        submit_plan(plan)
    ids = str(error.value).rsplit(": ", 1)[1].split(", ")
    assert len(ids) == 2
    assert _wait_ended(slurm_cluster, ids) == ["CANCELLED", "CANCELLED"]


def test_rerun_and_requeue_never_overwrite_logs(slurm_cluster, tmp_path):
    plan, record = _plan(tmp_path, [("a", 0, 0, {})])
    write_plan(plan, ["main.py"])
    first = submit_plan(plan)[0].job_id
    assert slurm_cluster.wait(first) == "COMPLETED"
    second = submit_plan(plan)[0].job_id
    assert slurm_cluster.wait(second) == "COMPLETED"
    directory = tmp_path / "results" / "a"
    logs = sorted(p.name for p in directory.glob("log-*_attempt*.out"))
    assert logs == [
        f"log-nemo-megatron-probe_a_{first}_attempt0.out",
        f"log-nemo-megatron-probe_a_{second}_attempt0.out",
    ]
    assert all("probe a attempt 0" in (directory / name).read_text() for name in logs)
