"""Hostile #SBATCH values on a real Slurm: the job name Slurm records and the log paths it writes are exactly
the launcher's, with `%`, quotes, spaces, `$(...)`, `#` and unicode taken literally, and the launcher's own
%j / %A_%a still expanded. Two submissions: one single job, one array job.

The property tests in test_quoting.py read #SBATCH lines with a model of sbatch and of Slurm's filename
patterns; this file checks that model against Slurm itself.
"""

import subprocess
from datetime import timedelta
from pathlib import Path

from omegaconf import OmegaConf

from nemo_launcher.launch.job_spec import Command, JobSpec
from nemo_launcher.launch.pipeline import Plan, PlannedJob, build_plan, submit_plan, write_plan

from .conftest import compose_config

# No slash (a run name is one path component), no backslash or line break (refused on Slurm).
HOSTILE_NAME = "n %j %A_%a %x %N %u %% %5j 'q\" $(touch CANARY) `touch CANARY` #c é✓ hetjob"
HOSTILE_DIR = "d %j %% 'q\" $(touch CANARY) #c ü"
# An unknown cluster key goes to sbatch as is: the one way a user's backslash reaches an #SBATCH line.
HOSTILE_COMMENT = "c \\ \\\\ \"q\" 's' %j $(touch CANARY) #c é"


def _backend(tmp_path: Path):
    cfg, choices = compose_config(
        [
            "stages=[training]",
            "training=gpt3/tiny",
            f"base_results_dir={tmp_path}/results",
            "cluster.exclusive=false",
        ]
    )
    OmegaConf.update(cfg, "cluster.comment", HOSTILE_COMMENT, force_add=True)
    return build_plan(cfg, choices).backend


def _submit(backend, tmp_path: Path, **extra) -> tuple:
    record = tmp_path / "record.txt"
    spec = JobSpec(
        stage="probe",
        name=HOSTILE_NAME,
        directory=tmp_path / HOSTILE_DIR,
        commands=(Command("tests.launch.slurm_probe", ("--record", str(record), "--name", HOSTILE_NAME)),),
        time_limit=timedelta(minutes=5),
        uses_gpus=False,
        **extra,
    )
    backend.validate([[spec]])  # the launcher accepts these names on Slurm
    plan = Plan(backend.context, backend, [[PlannedJob(spec, backend.script_path(spec), backend.render(spec))]])
    write_plan(plan, ["main.py"])
    (submitted,) = submit_plan(plan)
    return submitted.job_id, spec, record


def _scontrol_show_job(job_id: str) -> dict:
    """JobName (end of the first line) and Comment (a line of its own) as `scontrol show job` prints them."""
    out = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True, timeout=20
    ).stdout
    lines = out.split("\n")
    (comment,) = [line.strip(" ")[len("Comment=") :] for line in lines if line.startswith("   Comment=")]
    return {"JobName": lines[0].split(" JobName=", 1)[1], "Comment": comment}


def _no_canary(tmp_path: Path) -> None:
    assert not list(tmp_path.rglob("CANARY")) and not Path("CANARY").exists()


def test_hostile_job_name_and_log_paths_on_slurm(slurm_cluster, tmp_path):
    backend = _backend(tmp_path)
    job_id, spec, record = _submit(backend, tmp_path)
    job_name = f"nemo-megatron-{HOSTILE_NAME}"
    shown = _scontrol_show_job(job_id)
    # The launcher adds its submission tag (nemo-launcher:<pipeline>:<n>) after the user's own comment.
    assert shown["JobName"] == job_name
    assert shown["Comment"].startswith(HOSTILE_COMMENT + " nemo-launcher:"), shown
    assert slurm_cluster.wait(job_id, timeout_s=120) == "COMPLETED"
    stem = spec.directory / f"log-{job_name}"
    batch_out, batch_err = Path(f"{stem}_{job_id}.out"), Path(f"{stem}_{job_id}.err")
    step_out, step_err = Path(f"{stem}_{job_id}_attempt0.out"), Path(f"{stem}_{job_id}_attempt0.err")
    # Exactly these four files: nothing landed at a path where Slurm expanded a piece of the name.
    assert sorted(p.name for p in spec.directory.glob("log-*")) == sorted(
        p.name for p in (batch_out, batch_err, step_out, step_err)
    )
    assert f"probe {HOSTILE_NAME} attempt 0 job {job_id}" in step_out.read_text()
    assert len(record.read_text().splitlines()) == 1  # the probe ran, once
    _no_canary(tmp_path)


def test_hostile_array_job_logs_on_slurm(slurm_cluster, tmp_path):
    backend = _backend(tmp_path)
    job_id, spec, record = _submit(backend, tmp_path, array_items=(0, 1))
    assert [slurm_cluster.wait(f"{job_id}_{index}", timeout_s=120) for index in (0, 1)] == ["COMPLETED"] * 2
    stem = spec.directory / f"log-nemo-megatron-{HOSTILE_NAME}"
    expected = []
    for index in (0, 1):
        expected += [
            f"{stem}_{job_id}_{index}.out",
            f"{stem}_{job_id}_{index}.err",
            f"{stem}_{job_id}_{index}_attempt0.out",
            f"{stem}_{job_id}_{index}_attempt0.err",
        ]
    assert sorted(str(p) for p in spec.directory.glob("log-*")) == sorted(expected)
    assert len(record.read_text().splitlines()) == 2
    _no_canary(tmp_path)
