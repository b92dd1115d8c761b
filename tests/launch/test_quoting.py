"""Hostile strings reach the executed command unchanged and execute nothing.

Scripts are rendered for real and run with bash; `python3` and `srun` are replaced by probes that record
what they were given. The #SBATCH lines, which bash skips, are read back with a model of what sbatch and
Slurm's filename patterns do to them; tests/launch/test_sbatch_values_on_slurm.py checks that model on a
real Slurm.
"""

import copy
import functools
import json
import os
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from nemo_launcher.launch.errors import ConfigError
from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.pipeline import build_plan, write_plan

from .conftest import compose_config

NASTY_PIECES = [
    "$(touch CANARY)",
    "`touch CANARY`",
    "'",
    '"',
    "\\",
    " ",
    "\n",
    "; touch CANARY #",
    "$HOME",
    "é✓",
    "*",
    "!",
]
hostile = (
    st.lists(
        st.one_of(
            st.sampled_from(NASTY_PIECES),
            st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=5,
    )
    .map("".join)
    .filter(lambda s: "${" not in s and s.strip(".") != "" and "\r" not in s)
)

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


@functools.cache
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
# A run name is one path component: no line breaks on any backend (the run schema refuses them).
@given(name=hostile.filter(lambda s: "\n" not in s), value=hostile)
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


# Slurm writes no log to a path holding a line break or a backslash: the launcher refuses those (tested below).
slurm_safe = hostile.filter(lambda s: "\n" not in s and "\\" not in s)
# `%` pieces that Slurm would expand in a log path if they arrived unescaped.
PERCENT_PIECES = ["%j", "%A", "%a", "%N", "%u", "%x", "%%", "%5j", "%"]
slurm_safe_with_percent = st.lists(st.one_of(st.sampled_from(PERCENT_PIECES), slurm_safe), min_size=1, max_size=4).map(
    "".join
)


def sbatch_reads(line: str, option: str) -> str:
    """What sbatch makes of `#SBATCH --option=value`: double quotes group, a backslash takes the next
    character as is, and an unquoted `#` starts a comment (observed on Slurm 22.05)."""
    prefix = f"#SBATCH --{option}="
    assert line.startswith(prefix), line
    value, quoted, escaped = [], False, False
    for char in line[len(prefix) :]:
        if escaped:
            value.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif not quoted and (char.isspace() or char == "#"):
            break
        else:
            value.append(char)
    assert not quoted and not escaped, line
    return "".join(value)


def slurm_expands(pattern: str, job_id: str, array_job_id: str = "", array_task_id: str = "") -> str:
    """Slurm's filename patterns as the launcher uses them: %% is one %, %j/%A/%a are ids. Any other % is a
    pattern that Slurm would expand, which the launcher must never leave in a user's path."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] != "%":
            out.append(pattern[i])
            i += 1
            continue
        code = pattern[i + 1] if i + 1 < len(pattern) else ""
        values = {"%": "%", "j": job_id, "A": array_job_id, "a": array_task_id}
        assert code in values, f"unescaped Slurm pattern %{code} in {pattern!r}"
        out.append(values[code])
        i += 2
    return "".join(out)


def _sbatch_line(script: str, option: str) -> str:
    # sbatch splits the script at "\n" only (str.splitlines would also split at \x85, \u2028, ...).
    (line,) = [line for line in script.split("\n") if line.startswith(f"#SBATCH --{option}=")]
    return line


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=slurm_safe_with_percent, value=hostile, mount=hostile.filter(lambda s: ":" not in s and "," not in s))
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
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        PROBE_OUT=str(tmp / "probe.jsonl"),
        SLURM_JOB_ID="42",
        SLURM_JOB_NODELIST="node1",
    )
    subprocess.run(["bash", str(job.script_path)], cwd=tmp, env=env, check=True, capture_output=True)
    (record,) = _records(tmp / "probe.jsonl")
    assert record["env"] == value
    mounts = next(arg for arg in record["argv"] if arg.startswith("--container-mounts="))
    assert mounts.split("=", 1)[1].split(",")[-1] == f"/{mount}:/{mount}"
    assert record["argv"][-6:-2] == ["python3", "-u", "-m", "nemo_launcher.jobs.gpt.train"]
    assert yaml.safe_load(Path(record["argv"][-1]).read_text())["run"]["name"] == name
    # The step's logs are written by the shell at the literal path; the batch logs by Slurm from the pattern.
    stem = job.spec.directory / f"log-nemo-megatron-{name}"
    assert Path(f"{stem}_42_attempt0.out").is_file() and Path(f"{stem}_42_attempt0.err").is_file()
    assert sbatch_reads(_sbatch_line(job.script, "job-name"), "job-name") == f"nemo-megatron-{name}"
    for kind in ("output", "error"):
        pattern = sbatch_reads(_sbatch_line(job.script, kind), kind)
        assert slurm_expands(pattern, "42") == f"{stem}_42.{kind[:3]}"
    assert not list(tmp.rglob("CANARY")) and not Path("CANARY").exists()


def test_slurm_refuses_line_break_in_run_name(tmp_path):
    cfg, choices = _plan(tmp_path, "bcm", "two\nlines", "v")
    with pytest.raises(ConfigError, match="line break"):
        build_plan(cfg, choices)


@pytest.mark.parametrize("key", ["training.run.name", "base_results_dir"])
def test_slurm_refuses_backslash_in_log_paths(tmp_path, key):
    # Slurm drops every backslash of an --output path and then expands no pattern: no literal path exists.
    cfg, choices = _plan(tmp_path, "bcm", "plain", "v")
    OmegaConf.update(cfg, key, "back\\slash" if key == "training.run.name" else f"{tmp_path}/back\\slash")
    with pytest.raises(ConfigError, match=r"backslash.*remove it") as error:
        build_plan(cfg, choices)
    assert str(error.value).startswith("training.run.") and "\\" in str(error.value)


def _percent_plan(tmp: Path, name: str, results: str):
    cfg, choices = _plan(tmp, "bcm", name, "v")
    OmegaConf.update(cfg, "base_results_dir", results)
    return build_plan(cfg, choices).jobs_by_stage[0][0]


def test_percent_in_run_name_and_results_path_is_literal_for_slurm(tmp_path):
    results = f"{tmp_path}/r%N%u"
    job = _percent_plan(tmp_path, "a%jb%%c%5A", results)
    expected = f"{results}/a%jb%%c%5A/log-nemo-megatron-a%jb%%c%5A"
    escaped = expected.replace("%", "%%")
    assert f"#SBATCH --output={escaped}_%j.out\n" in job.script
    assert f"#SBATCH --error={escaped}_%j.err\n" in job.script
    assert slurm_expands(sbatch_reads(_sbatch_line(job.script, "output"), "output"), "7") == f"{expected}_7.out"
    # The job name is no filename pattern: it stays as typed.
    assert "#SBATCH --job-name=nemo-megatron-a%jb%%c%5A\n" in job.script
    # srun gets no --output at all: srun would expand `%` in it (and does not keep `%%` literal).
    srun_line = next(line for line in job.script.split("\n") if line.startswith("srun "))
    assert "--output" not in srun_line and "--error" not in srun_line
    assert srun_line.endswith(' >>"${log_stem}.out" 2>>"${log_stem}.err"')


def test_array_job_keeps_its_own_patterns_and_escapes_the_path(tmp_path):
    backend = build_plan(*_plan(tmp_path, "bcm", "plain", "v")).backend
    spec = JobSpec(
        stage="data_preparation",
        name="prep%a",
        directory=tmp_path / "d%A",
        commands=(Command("m"),),
        time_limit=timedelta(minutes=5),
        uses_gpus=False,
        array_items=(0, 1, 2, 3),
        array_limit=2,
    )
    script = backend.render(spec)
    assert f"#SBATCH --output={tmp_path}/d%%A/log-nemo-megatron-prep%%a_%A_%a.out\n" in script
    assert "#SBATCH --array=0-3%2\n" in script
    pattern = sbatch_reads(_sbatch_line(script, "output"), "output")
    assert slurm_expands(pattern, "9", "8", "3") == f"{tmp_path}/d%A/log-nemo-megatron-prep%a_8_3.out"
