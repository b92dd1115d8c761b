"""Hostile strings reach the executed command unchanged and execute nothing.

Scripts are rendered for real and run with bash; `python3` and `srun` are replaced by probes that record
what they were given.
"""
import copy
import functools
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from nemo_launcher.launch.pipeline import build_plan, submit_plan, write_plan

from .conftest import compose_config

NASTY_PIECES = ["$(touch CANARY)", "`touch CANARY`", "'", '"', "\\", " ", "\n", "; touch CANARY #", "$HOME", "é✓", "*", "!"]
hostile = st.lists(
    st.one_of(
        st.sampled_from(NASTY_PIECES),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=6),
    ),
    min_size=1,
    max_size=5,
).map("".join).filter(lambda s: "${" not in s and s.strip(".") != "" and "\r" not in s)

PROBE = """#!{python}
import json, os, sys
with open(os.environ["PROBE_OUT"], "a") as out:
    out.write(json.dumps({{"argv": sys.argv[1:], "env": os.environ.get("HOSTILE")}}) + "\\n")
"""


def _probe(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_text(PROBE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@functools.lru_cache(maxsize=None)
def _composed(cluster_type: str, extra: tuple):
    return compose_config(["stages=[training]", "training=gpt3/tiny", f"cluster_type={cluster_type}", *extra])


def _plan(tmp: Path, cluster_type: str, name: str, value: str, extra=()):
    cfg, choices = _composed(cluster_type, tuple(extra))
    cfg = copy.deepcopy(cfg)
    OmegaConf.update(cfg, "base_results_dir", f"{tmp}/results")
    OmegaConf.update(cfg, "training.run.name", name)
    OmegaConf.update(cfg, "training.exp_manager.wandb_logger_kwargs.name", value)
    OmegaConf.update(cfg, "env_vars.HOSTILE", value, force_add=True)
    return cfg, choices


def _records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile, value=hostile)
def test_interactive_script_passes_hostile_values_through(tmp_path_factory, name, value):
    tmp = tmp_path_factory.mktemp("q")
    cfg, choices = _plan(tmp, "interactive", name, value)
    plan = build_plan(cfg, choices)
    write_plan(plan, ["main.py", value])
    job = plan.jobs_by_stage[0][0]
    subprocess.run(["bash", "-n", str(job.script_path)], check=True)
    env = dict(os.environ, NEMO_LAUNCHER_PYTHON=str(_probe(tmp, "python")), PROBE_OUT=str(tmp / "probe.jsonl"))
    subprocess.run(["bash", str(job.script_path)], cwd=tmp, env=env, check=True, capture_output=True)
    (record,) = _records(tmp / "probe.jsonl")
    assert record["env"] == value
    assert record["argv"][:3] == ["-u", "-m", "nemo_launcher.jobs.gpt.train"]
    config = yaml.safe_load(Path(record["argv"][4]).read_text())
    assert config["run"]["name"] == name and config["exp_manager"]["wandb_logger_kwargs"]["name"] == value
    assert not list(tmp.rglob("CANARY")) and not Path("CANARY").exists()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile.filter(lambda s: "\n" not in s), value=hostile, mount=hostile.filter(lambda s: ":" not in s and "," not in s))
def test_slurm_script_passes_hostile_values_through(tmp_path_factory, name, value, mount):
    tmp = tmp_path_factory.mktemp("q")
    cfg, choices = _plan(tmp, "bcm", name, value, extra=["container=registry/image:1"])
    OmegaConf.update(cfg, "container_mounts", [f"/{mount}"])
    plan = build_plan(cfg, choices)
    write_plan(plan, ["main.py"])
    job = plan.jobs_by_stage[0][0]
    subprocess.run(["bash", "-n", str(job.script_path)], check=True)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    _probe(bin_dir, "srun")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho node1\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PROBE_OUT=str(tmp / "probe.jsonl"),
               SLURM_JOB_ID="42", SLURM_JOB_NODELIST="node1")
    subprocess.run(["bash", str(job.script_path)], cwd=tmp, env=env, check=True, capture_output=True)
    (record,) = _records(tmp / "probe.jsonl")
    assert record["env"] == value
    mounts = next(arg for arg in record["argv"] if arg.startswith("--container-mounts="))
    assert mounts.split("=", 1)[1].split(",")[-1] == f"/{mount}:/{mount}"
    assert record["argv"][-6:-2] == ["python3", "-u", "-m", "nemo_launcher.jobs.gpt.train"]
    assert yaml.safe_load(Path(record["argv"][-1]).read_text())["run"]["name"] == name
    assert not list(tmp.rglob("CANARY")) and not Path("CANARY").exists()


def test_slurm_refuses_line_break_in_run_name(tmp_path):
    import pytest

    from nemo_launcher.launch.errors import ConfigError

    cfg, choices = _plan(tmp_path, "bcm", "two\nlines", "v")
    with pytest.raises(ConfigError, match="line break"):
        build_plan(cfg, choices)
