"""A heterogeneous job (the shape of the RLHF PPO job) on the real (local) Slurm: four `hetjob` components on four
nodes, each group seeing the others' first hosts, and a group that dies failing the whole job at once with its exit
code. Apart from tests/launch/test_heterogeneous_jobs.py, whose tests need no cluster: a module with a Slurm test
runs in the serial Slurm unit (tests/conftest.py)."""

import subprocess
import time

import pytest

from nemo_launcher.launch.pipeline import Plan, PlannedJob, build_plan, submit_plan, write_plan

from .conftest import compose_config
from .test_heterogeneous_jobs import _probes_alive, four_roles, records


@pytest.mark.parametrize("dying", [None, "critic"])
def test_slurm_runs_the_four_groups_on_nodes_of_their_own(slurm_cluster, tmp_path, dying):
    """On the real (local) Slurm: four `hetjob` components on four nodes, each group seeing the others' first hosts;
    a role that dies (status 5) fails the whole job at once, with its exit code."""
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/tiny", f"base_results_dir={tmp_path}/results"])
    backend = build_plan(cfg, choices).backend
    record = tmp_path / "record.txt"
    sleeps = {"reward_model": 300, "initial_policy": 300, "critic": 300, "actor": 1}
    statuses = {}
    if dying:
        sleeps.update(critic=1, actor=300)
        statuses[dying] = 5
    spec = four_roles(tmp_path, record, sleeps, statuses)
    plan = Plan(backend.context, backend, [[PlannedJob(spec, backend.script_path(spec), backend.render(spec))]])
    write_plan(plan, ["test"])
    started = time.monotonic()
    (submitted,) = submit_plan(plan)
    state = slurm_cluster.wait(submitted.job_id, timeout_s=120)
    assert time.monotonic() - started < 100
    shown = subprocess.run(["scontrol", "show", "job", "-o", submitted.job_id], capture_output=True, text=True).stdout
    if dying:
        assert state == "FAILED", shown
        assert "ExitCode=5:0" in shown, shown
        assert set(records(record)) == {"critic"}
    else:
        assert state == "COMPLETED", shown
        hosts = dict(word.split("=") for word in records(record)["actor"])
        assert sorted(hosts.values()) == sorted(slurm_cluster.nodes[:3]), hosts  # each server on a node of its own
    assert _probes_alive(record) == []
