"""The interactive backend runs stages here in order and stops the chain at the first failure."""

from datetime import timedelta

import pytest

from nemo_launcher.launch.errors import StageFailed
from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.pipeline import Plan, PlannedJob, submit_plan, write_plan

from .conftest import compose_config


def _plan(tmp_path, exits):
    cfg, choices = compose_config(
        ["stages=[training]", "training=gpt3/tiny", "cluster_type=interactive", f"base_results_dir={tmp_path}/r"]
    )
    from nemo_launcher.launch.pipeline import build_plan

    backend = build_plan(cfg, choices).backend
    record = tmp_path / "record.txt"
    stages = []
    for index, code in enumerate(exits):
        name = f"s{index}"
        spec = JobSpec(
            stage=name,
            name=name,
            directory=tmp_path / "r" / name,
            time_limit=timedelta(minutes=1),
            commands=(
                Command("tests.launch.slurm_probe", ("--record", str(record), "--name", name, "--exit", str(code))),
            ),
        )
        stages.append([PlannedJob(spec, backend.script_path(spec), backend.render(spec))])
    return Plan(backend.context, backend, stages), record


def test_stages_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan, record = _plan(tmp_path, [0, 0, 0])
    write_plan(plan, ["main.py"])
    submitted = submit_plan(plan)
    assert [entry.job_id for entry in submitted] == [None, None, None]
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["s0", "s1", "s2"]
    assert list((tmp_path / "r" / "s0").glob("log-s0_*.out"))


def test_failing_stage_stops_the_chain(tmp_path):
    plan, record = _plan(tmp_path, [0, 3, 0])
    write_plan(plan, ["main.py"])
    with pytest.raises(StageFailed, match="stage 's1'.*status 3"):
        submit_plan(plan)
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["s0", "s1"]


def test_several_processes_use_torchrun(launch, tmp_path):
    code, out, err = launch(
        ["stages=[training]", "training=gpt3/tiny", "cluster_type=interactive", "training.trainer.devices=2"]
    )
    assert code == 0, err
    script = next((tmp_path / "results").rglob("*_submission.sh")).read_text()
    assert "-m torch.distributed.run --standalone --nproc_per_node=2 -m nemo_launcher.jobs.gpt.train" in script
