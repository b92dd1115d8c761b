"""Base Command Platform scripts pass hostile strings through unchanged and execute nothing.

The rendered script runs with bash, with a fake `bcprun` first on PATH. The fake records its argv, then does
what bcprun does with it: sets the `--env NAME=value` pairs and runs `--cmd` through a shell, where a probe
`python3` records what it was given. So each value is checked twice: as bcprun receives it (the `--cmd`
string read back with shlex.split) and as the job program receives it.
"""

import copy
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from omegaconf import OmegaConf

from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.pipeline import build_plan, write_plan

from .test_quoting import _composed, _probe, _records, hostile

FAKE_BCPRUN = """#!{python}
import json, os, shlex, subprocess, sys

args, options, env_pairs = sys.argv[1:], {{}}, []
for flag, value in zip(args[::2], args[1::2]):
    if flag == "--env":
        env_pairs.append(value)
    else:
        options[flag] = value
with open(os.environ["BCPRUN_OUT"], "a") as out:
    out.write(json.dumps({{
        "argv": args, "options": options, "env": env_pairs, "cmd_words": shlex.split(options["--cmd"]),
        "wandb": os.environ.get("WANDB_API_KEY"),
    }}) + "\\n")
print("bcprun probe ran", flush=True)
# What bcprun itself does with them: the --env pairs become the environment, --cmd runs through a shell.
environment = dict(os.environ, **dict(pair.split("=", 1) for pair in env_pairs))
subprocess.run(["sh", "-c", options["--cmd"]], env=environment, check=True)
"""
# A run name is one path component with no line break (the run schema refuses those on every backend).
run_names = hostile.filter(lambda s: "\n" not in s)
# The first line of the key file is the key; the launcher refuses a blank one.
keys = hostile.map(lambda s: s.split("\n")[0]).filter(lambda s: s.strip())


def _fake_tools(tmp: Path) -> dict:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "bcprun").write_text(FAKE_BCPRUN.format(python=sys.executable))
    (bin_dir / "bcprun").chmod(0o755)
    _probe(bin_dir, "python3")  # the job program, as the shell that bcprun starts finds it
    return dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        BCPRUN_OUT=str(tmp / "bcprun.jsonl"),
        PROBE_OUT=str(tmp / "python3.jsonl"),
    )


def _run(script: Path, tmp: Path, environment: dict) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    subprocess.run(["bash", str(script)], cwd=tmp, env=environment, check=True, capture_output=True)


def _no_canary(tmp: Path) -> None:
    assert not list(tmp.rglob("CANARY")) and not Path("CANARY").exists()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=run_names, value=hostile, folder=hostile, key=keys)
def test_bcp_script_passes_hostile_values_through(tmp_path_factory, name, value, folder, key):
    tmp = tmp_path_factory.mktemp("bcp")
    key_file = tmp / f"key {folder}"
    key_file.write_text(f"{key}\nsecond line\n")
    cfg, choices = _composed("bcp", ())
    cfg = copy.deepcopy(cfg)
    for path, setting in (
        ("base_results_dir", f"{tmp}/{folder}/results"),
        ("training.run.name", name),
        ("training.exp_manager.wandb_logger_kwargs.name", value),
        ("wandb_api_key_file", str(key_file)),
    ):
        OmegaConf.update(cfg, path, setting)
    OmegaConf.update(cfg, "env_vars.HOSTILE", value, force_add=True)
    plan = build_plan(cfg, choices)
    write_plan(plan, ["main.py", value])
    job = plan.jobs_by_stage[0][0]
    _run(job.script_path, tmp, _fake_tools(tmp))

    (bcprun,) = _records(tmp / "bcprun.jsonl")
    config_file = job.spec.directory / f"{name}_hydra.yaml"
    assert bcprun["options"] == {"--nnodes": "1", "--npernode": "1", "--cmd": bcprun["options"]["--cmd"]}
    assert f"HOSTILE={value}" in bcprun["env"]
    assert f"PYTHONPATH={plan.context.launcher_scripts_path}" in bcprun["env"]
    assert bcprun["cmd_words"] == ["python3", "-u", "-m", "nemo_launcher.jobs.gpt.train", "--config", str(config_file)]
    assert bcprun["wandb"] == key
    (program,) = _records(tmp / "python3.jsonl")
    assert program == {"argv": bcprun["cmd_words"][1:], "env": value}
    config = yaml.safe_load(config_file.read_text())
    assert config["run"]["name"] == name and config["exp_manager"]["wandb_logger_kwargs"]["name"] == value
    (log,) = [p for p in job.spec.directory.iterdir() if p.name.startswith(f"log-{name}_") and p.name.endswith(".out")]
    assert "bcprun probe ran" in log.read_text()
    _no_canary(tmp)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=run_names, argument=hostile)
def test_bcp_array_work_goes_through_mpirun_launcher_unchanged(tmp_path_factory, name, argument):
    # Where there are no job arrays, the items are dealt over array_nodes x array_tasks_per_node replicas.
    tmp = tmp_path_factory.mktemp("bcp_array")
    cfg, choices = _composed("bcp", ())
    cfg = copy.deepcopy(cfg)
    OmegaConf.update(cfg, "base_results_dir", f"{tmp}/results")
    backend = build_plan(cfg, choices).backend
    spec = JobSpec(
        stage="data_preparation",
        name=name,
        directory=tmp / "job",
        time_limit=timedelta(hours=1),
        commands=(Command("nemo_launcher.jobs.data.preprocess", ("--item", argument)),),
        uses_gpus=False,
        array_items=tuple(range(30)),
        array_limit=30,
        array_nodes=3,
        array_tasks_per_node=4,
    )
    spec.directory.mkdir()
    script = backend.script_path(spec)
    script.write_text(backend.render(spec))
    _run(script, tmp, _fake_tools(tmp))

    (bcprun,) = _records(tmp / "bcprun.jsonl")
    assert bcprun["options"]["--nnodes"] == "3" and bcprun["options"]["--npernode"] == "4"
    assert bcprun["options"]["--launcher"] == "mpirun --allow-run-as-root"
    assert bcprun["cmd_words"] == ["python3", "-u", "-m", "nemo_launcher.jobs.data.preprocess", "--item", argument]
    (program,) = _records(tmp / "python3.jsonl")
    assert program["argv"] == ["-u", "-m", "nemo_launcher.jobs.data.preprocess", "--item", argument]
    _no_canary(tmp)


def test_bcp_script_round_trips_a_fixed_nasty_example(tmp_path):
    """One readable example of the property above, so a failure is easy to reproduce by hand."""
    name = "a b'c\"d$(touch CANARY)`touch CANARY`;x\\y%j é✓"
    cfg, choices = _composed("bcp", ())
    cfg = copy.deepcopy(cfg)
    OmegaConf.update(cfg, "base_results_dir", f"{tmp_path}/r $(touch CANARY)")
    OmegaConf.update(cfg, "training.run.name", name)
    OmegaConf.update(cfg, "env_vars.HOSTILE", name, force_add=True)
    plan = build_plan(cfg, choices)
    write_plan(plan, ["main.py"])
    job = plan.jobs_by_stage[0][0]
    _run(job.script_path, tmp_path, _fake_tools(tmp_path))
    (bcprun,) = _records(tmp_path / "bcprun.jsonl")
    assert bcprun["cmd_words"][-1] == f"{tmp_path}/r $(touch CANARY)/{name}/{name}_hydra.yaml"
    assert _records(tmp_path / "python3.jsonl")[0]["env"] == name
    _no_canary(tmp_path)
