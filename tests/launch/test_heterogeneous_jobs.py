"""Heterogeneous jobs (JobSpec.groups, the shape of the RLHF PPO job): rendered for Slurm as `hetjob` components and
run here as local process trees, with hosts exported to every group and a monitor that ends the job with the status
of the first group to end, leaving no process behind; refused on Base Command Platform."""

import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from nemo_launcher.launch.backends import backend_class
from nemo_launcher.launch.errors import ConfigError
from nemo_launcher.launch.job_spec import Command, Dependency, JobGroup, JobSpec, Wait

from .backend_contract import context_for

HOSTS = ("NEMO_RLHF_REWARD_MODEL_HOST", "NEMO_RLHF_INITIAL_POLICY_HOST", "NEMO_RLHF_CRITIC_HOST")


def probe(record: Path, name: str, sleep: float, status: int = 0) -> Command:
    args = ("--record", str(record), "--name", name, "--sleep", str(sleep), "--exit", str(status), "--env", *HOSTS)
    return Command("tests.launch.slurm_probe", args)


def four_roles(tmp: Path, record: Path, sleeps: dict, statuses: dict | None = None, actor_tasks: int = 1) -> JobSpec:
    statuses = statuses or {}
    names = ("reward_model", "initial_policy", "critic", "actor")
    groups = tuple(
        JobGroup(
            name,
            probe(record, name, sleeps[name], statuses.get(name, 0)),
            nodes=1,
            tasks_per_node=actor_tasks if name == "actor" else 1,
            host_variable=HOSTS[index] if index < 3 else None,
        )
        for index, name in enumerate(names)
    )
    return JobSpec.heterogeneous(
        groups,
        stage="rlhf_ppo",
        name="ppo_probe",
        directory=tmp / "results" / "ppo_probe",
        time_limit=timedelta(minutes=5),
        uses_gpus=False,
        stop_grace=timedelta(seconds=2),
        driver_group="actor",
    )


def records(record: Path) -> dict[str, list[str]]:
    if not record.exists():
        return {}
    return {line.split()[0]: line.split()[3:] for line in record.read_text().splitlines()}


def test_a_heterogeneous_spec_derives_its_size_from_its_groups(tmp_path):
    spec = four_roles(tmp_path, tmp_path / "r", dict.fromkeys(("reward_model", "initial_policy", "critic", "actor"), 1))
    assert spec.nodes == 4 and spec.tasks_per_node == 1 and len(spec.commands) == 4
    with pytest.raises(AssertionError):
        JobGroup("two words", spec.commands[0])


def test_slurm_renders_one_component_per_group(tmp_path):
    backend = backend_class("bcm")(context_for("bcm", tmp_path))
    spec = four_roles(tmp_path, tmp_path / "r", dict.fromkeys(("reward_model", "initial_policy", "critic", "actor"), 1))
    spec = JobSpec.heterogeneous(
        tuple(JobGroup(g.name, g.command, 2 if g.name == "actor" else 1, 8, g.host_variable) for g in spec.groups),
        stage="rlhf_ppo",
        name="ppo",
        directory=spec.directory,
        time_limit=timedelta(hours=4),
        checkpoint_signal=True,
        requeue_marker=tmp_path / "actor" / "RESUME",
        waits=(Wait(Dependency.SINGLETON),),
    )
    text = backend.render(spec)
    # Slurm holds the components of a singleton heterogeneous job on each other for ever: never asked for.
    assert "singleton" not in text
    sbatch = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert sbatch.count("#SBATCH hetjob") == 3
    components = "\n".join(sbatch).split("#SBATCH hetjob")
    assert ["--nodes=2" in part for part in components] == [False, False, False, True]
    assert all("--ntasks-per-node=8" in part and "--gpus-per-node=8" in part for part in components)
    assert all("--time=4:00:00" in part and "--signal=USR1@" in part for part in components)
    assert "--job-name=ppo" in components[0] and "--job-name" not in components[1]  # carried over by Slurm
    assert "--requeue" in components[0] and "--output=" in components[0]
    for index, name in enumerate(("reward_model", "initial_policy", "critic", "actor")):
        assert f"--het-group={index} " in text
        assert f'>>"${{log_stem}}_{name}.out"' in text
    assert 'NEMO_RLHF_CRITIC_HOST="${group_host_2}"' in text
    assert 'scontrol show hostnames "${SLURM_JOB_NODELIST_HET_GROUP_3}"' in text
    assert text.rstrip().endswith('exit "${first_status}"')
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_bcp_refuses_a_heterogeneous_job(tmp_path):
    backend = backend_class("bcp")(context_for("bcp", tmp_path))
    spec = four_roles(tmp_path, tmp_path / "r", dict.fromkeys(("reward_model", "initial_policy", "critic", "actor"), 1))
    with pytest.raises(ConfigError, match=r"cluster_type='bcp': the rlhf_ppo job is heterogeneous .*cluster_type=bcm"):
        backend.validate([[spec]])


def _run_here(tmp_path: Path, spec: JobSpec) -> subprocess.CompletedProcess:
    backend = backend_class("interactive")(context_for("interactive", tmp_path))
    text = backend.render(spec)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    script = backend.script_path(spec)
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    environment = dict(os.environ, NEMO_LAUNCHER_PYTHON=os.environ.get("NEMO_LAUNCHER_PYTHON", "python3"))
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, env=environment)


def _probes_alive(record: Path) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "tests.launch.slurm_probe" in line and str(record) in line]


def test_here_the_first_group_to_end_ends_the_job_with_its_status(tmp_path):
    """The actor ends (status 3) while the servers would run for minutes: the servers are stopped after the grace
    period and the job exits 3, with every group's host exported as localhost."""
    record = tmp_path / "record.txt"
    spec = four_roles(
        tmp_path, record, {"reward_model": 300, "initial_policy": 300, "critic": 300, "actor": 1}, {"actor": 3}
    )
    started = time.monotonic()
    result = _run_here(tmp_path, spec)
    assert result.returncode == 3, result.stdout + result.stderr
    assert time.monotonic() - started < 60
    assert "[monitor] actor ended with status 3; the other groups get 2 s to end" in result.stdout
    assert "[actor] probe actor attempt 0" in result.stdout  # each group's lines reach the terminal, prefixed
    assert records(record)["actor"] == [f"{name}=localhost" for name in HOSTS]
    assert set(records(record)) == {"actor"}  # the servers were stopped before they finished
    assert _probes_alive(record) == []
    logs = sorted(path.name.rsplit("_", 1)[-1] for path in spec.directory.glob("log-ppo_probe_*.out"))
    assert logs == ["actor.out", "critic.out", "model.out", "policy.out"]


def test_here_a_server_that_dies_ends_the_job_and_stops_the_actor(tmp_path):
    record = tmp_path / "record.txt"
    spec = four_roles(
        tmp_path,
        record,
        {"reward_model": 300, "initial_policy": 300, "critic": 0.5, "actor": 300},
        {"critic": 7},
        actor_tasks=2,  # torchrun with two workers: stopped as a whole
    )
    result = _run_here(tmp_path, spec)
    assert result.returncode == 7, result.stdout + result.stderr
    assert "[monitor] critic ended with status 7" in result.stdout
    assert "[monitor] sending SIGTERM to actor" in result.stdout
    assert set(records(record)) == {"critic"}
    assert _probes_alive(record) == []


def test_here_the_driver_s_status_counts_after_a_server_it_shut_down(tmp_path):
    """A server that ends well (the actor shut it down) leaves the actor the grace period: the job takes the actor's
    status; a server that ends well while the actor still runs past it fails the job."""
    record = tmp_path / "record.txt"
    spec = four_roles(
        tmp_path, record, {"reward_model": 0.2, "initial_policy": 300, "critic": 300, "actor": 1}, {"actor": 4}
    )
    result = _run_here(tmp_path, spec)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "[monitor] actor ended with status 4" in result.stdout
    record.unlink()
    spec = four_roles(tmp_path, record, {"reward_model": 0.2, "initial_policy": 300, "critic": 300, "actor": 300})
    result = _run_here(tmp_path, spec)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[monitor] reward_model ended while actor still ran: the job fails" in result.stdout
    assert _probes_alive(record) == []
