"""Processes against GPUs where no scheduler hands GPUs out: cluster_type=interactive and bcp.

    check_local_gpus(specs_by_stage, "interactive", dry_run=False)   # from Backend.validate

Slurm compares a job's processes per node with cluster.gpus_per_node (backends/slurm.py). On the interactive
backend the job runs on this machine, and on Base Command Platform the launcher runs inside the NGC job, on one of
the replicas bcprun starts the job's processes on (every replica has the same GPUs). A job whose config asks for
GPUs (`accelerator: gpu`) and starts more processes per node than this machine shows GPUs would fail as it starts:
CUDA finds no device, or two ranks share one. Jobs that say nothing about an accelerator pick the GPU when there is
one and the CPU otherwise, so they are left alone. A dry run checks nothing here: it is often made on another
machine than the run (the seeds' BCP commands, tried on a laptop), and must stay clean there.

GPUs are counted without importing torch: the device files the NVIDIA driver creates (/dev/nvidia0, ...), narrowed
by CUDA_VISIBLE_DEVICES when it is set.
"""

import glob
import os
import re
from collections.abc import Mapping, Sequence

import yaml

from .errors import ConfigError
from .job_spec import JobSpec

# Where each stage's processes per node come from, for the message (the other stages: run.ntasks_per_node).
_PROCESSES_KEY = {"training": "trainer.devices", "fine_tuning": "trainer.devices", "peft": "trainer.devices"}


def visible_gpu_count(environ: Mapping[str, str] = os.environ, dev: str = "/dev") -> int:
    """GPUs a process started here can use."""
    present = len([path for path in glob.glob(f"{dev}/nvidia*") if re.fullmatch(r"nvidia\d+", os.path.basename(path))])
    chosen = environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return present
    # CUDA stops at the first entry it cannot use; "" and "-1" hide every GPU.
    items = [item.strip() for item in chosen.split(",") if item.strip()]
    usable = 0
    for item in items:
        if item.startswith("-"):
            break
        usable += 1
    return min(usable, present)


def _gpu_setting(spec: JobSpec) -> str | None:
    """The key that says `accelerator: gpu` in the job's resolved config (trainer.accelerator, or a top-level
    accelerator), or None. The job binds that same file when it starts, so this is the setting it will run with."""
    if not spec.uses_gpus:
        return None
    for path, text in spec.files:
        if not str(path).endswith("_hydra.yaml"):
            continue
        config = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
        if trainer.get("accelerator") == "gpu":
            return f"{spec.stage}.trainer.accelerator"
        if config.get("accelerator") == "gpu":
            return f"{spec.stage}.accelerator"
    return None


def check_local_gpus(
    specs_by_stage: Sequence[Sequence[JobSpec]], backend: str, dry_run: bool, environ: Mapping[str, str] = os.environ
) -> None:
    """Raises ConfigError for the first GPU job with more processes per node than GPUs here (real runs only)."""
    if dry_run:
        return
    gpus = None
    for specs in specs_by_stage:
        for spec in specs:
            setting = _gpu_setting(spec)
            if setting is None:
                continue
            gpus = visible_gpu_count(environ) if gpus is None else gpus
            if spec.tasks_per_node <= gpus:
                continue
            key = f"{spec.stage}.{_PROCESSES_KEY.get(spec.stage, 'run.ntasks_per_node')}"
            where = "this machine" if backend == "interactive" else "this replica of the NGC job"
            if gpus == 0:
                fix = f"shows no GPU (/dev/nvidia*, CUDA_VISIBLE_DEVICES): set {setting}=cpu, or run where the GPUs are"
            else:
                fix = f"shows {gpus} (/dev/nvidia*, CUDA_VISIBLE_DEVICES): set it to at most {gpus}"
            message = (
                f"{key}={spec.tasks_per_node}: the job starts {spec.tasks_per_node} GPU process(es) per node, one per "
                f"GPU ({setting}=gpu), and {where} {fix}"
            )
            raise ConfigError(message)
