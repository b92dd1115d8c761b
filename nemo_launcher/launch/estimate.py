"""`python3 -m nemo_launcher estimate <the overrides main.py takes> [--json]`: what each training-like job of the
pipeline will need and cost, predicted before anything is queued.

    python3 -m nemo_launcher estimate stages=[training] training=gpt3/5b
    python3 -m nemo_launcher estimate stages=[training] training=gpt3/175b cluster.gpu_type=h100-80gb --json

The config is composed and validated exactly as `python3 main.py` does it (the same config names, schemas and
checks, the same one-line errors, exit 2), then each job whose resolved config has a `trainer` and a `model` is
scored by the performance model (nemo_launcher/contract/performance) with `cluster.gpu_type` and
`cluster.gpu_hour_price`. Nothing is written and nothing is submitted. Input files (data, tokenizers) are not
looked for, and a job predicted not to fit is shown with its memory breakdown and fixes rather than refused, unless
the command line sets `check_inputs=true` or `memory_check=true`.
"""

import json
import os
import sys
from collections.abc import Mapping, Sequence

import yaml

from ..contract.performance import DEFAULT_GPU_TYPE, Estimate, estimate_job
from ..contract.performance.estimate import model_to_count
from .errors import LauncherError

# Top-level switches of conf/config.yaml the estimate turns off unless the command line sets them.
_OFF_UNLESS_GIVEN = ("check_inputs", "memory_check")


def _compose(overrides: Sequence[str]):
    """The composed config and the chosen config of each group, as main.py's @hydra.main would give them."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from .aliases import canonical_choices
    from .fast_yaml import install_fast_yaml_loader
    from .resolvers import REPO_ROOT, register_resolvers
    from .stages import STAGES

    register_resolvers()
    install_fast_yaml_loader()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
        # A prediction reads no input file, and shows a job that will not fit rather than refusing it; the command
        # line still decides when it names these keys.
        for key in _OFF_UNLESS_GIVEN:
            if key in cfg and not any(word.lstrip("+~").startswith(f"{key}=") for word in overrides):
                cfg[key] = False
    return cfg, canonical_choices(choices, STAGES)


def _training_sections(plan) -> list[dict]:
    """The resolved configs (as the job directories would get them) that a trainer runs."""
    sections = []
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            for _, text in job.spec.files:
                section = yaml.safe_load(text)
                if isinstance(section, dict) and isinstance(section.get("trainer"), dict) and "model" in section:
                    sections.append(section)
    return sections


def estimates_for(overrides: Sequence[str]) -> list[Estimate]:
    """One Estimate per training-like job of the pipeline the overrides describe (validated as main.py does)."""
    from .pipeline import build_plan

    cfg, choices = _compose(overrides)
    plan = build_plan(cfg, choices)
    cluster: Mapping = plan.context.cluster
    gpu_type = cluster.get("gpu_type") or DEFAULT_GPU_TYPE
    price = cluster.get("gpu_hour_price")
    estimates, pipeline_model = [], None
    for section in _training_sections(plan):
        # A fine-tuning job starts from the model a training stage before it in this pipeline trains.
        est = estimate_job(section, gpu_type, price, base_model=pipeline_model)
        if model_to_count(section) == section.get("model"):
            pipeline_model = section.get("model")
        if est is not None:
            estimates.append(est)
    return estimates


def _amount(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def format_table(estimates: Sequence[Estimate]) -> str:
    header = ("job", "gpus", "parameters", "memory/GPU", "step", "tokens/s", "MFU", "days", "GPU-hours", "cost")
    rows = [header]
    for est in estimates:
        rows.append(
            (
                est.job,
                f"{est.layout.devices} x {est.device.name}",
                f"{est.parameters / 1e9:.2f}B",
                f"{est.memory_per_gpu_gib:.1f} of {est.device.memory_gib:.0f} GiB",
                f"{est.step_time_s:.3f} s",
                f"{est.tokens_per_s:,.0f}",
                f"{est.mfu:.1%}",
                _amount(est.days_to_train, digits=2),
                _amount(est.gpu_hours, digits=0),
                _amount(est.cost, digits=0),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    for est in estimates:
        lines.append(f"{est.job}: time to train from {est.train_basis}")
        if not est.fits:
            lines.append(f"{est.job} does not fit in GPU memory:")
            lines.extend(f"  {line}" for line in est.memory_breakdown_lines())
            lines.extend(f"  fix: {fix}" for fix in est.fixes())
    return "\n".join(lines)


def main(overrides: Sequence[str], as_json: bool) -> int:
    from .cli import command_line_problem
    from .hydra_errors import launcher_errors

    problem = command_line_problem(None, list(overrides))
    if problem is not None:
        print(f"Error: {problem}", file=sys.stderr)
        return problem.exit_code
    try:
        with launcher_errors():
            estimates = estimates_for(overrides)
    except LauncherError as error:
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR"):
            raise
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code
    if as_json:
        for est in estimates:
            print(json.dumps(est.as_json(), sort_keys=True))
    elif estimates:
        print(format_table(estimates))
    else:
        print("No training-like job in this pipeline: nothing to estimate (add stages=[training] training=<config>)")
    return 0
