"""Orders stages, threads dependencies, writes job directories, submits atomically and prints the plan."""

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from .backends import backend_class
from .backends.base import Backend
from .context import LaunchContext, read_context
from .errors import LauncherError, StageFailed, StageInterrupted, config_error
from .families import check_same_family
from .inputs import check_input_paths, check_inputs
from .job_spec import JobSpec, Wait
from .model_sources import PipelineModels
from .predictions import gpu_type_of, plan_lines, refuse_what_does_not_fit
from .run_directories import check_run_directories
from .stages import STAGES, stage_class
from .submissions import dry_run_root, guard_live_runs, mirrored, write_if_changed
from .writes import make_directories


@dataclass(frozen=True)
class PlannedJob:
    spec: JobSpec
    script_path: Path
    script: str


@dataclass(frozen=True)
class Plan:
    context: LaunchContext
    backend: Backend
    jobs_by_stage: list[list[PlannedJob]]


@dataclass(frozen=True)
class Submitted:
    job: PlannedJob
    job_id: str | None
    waits: tuple[Wait, ...]  # what the job waited for: the job before it (where a queue chains them), its own waits


def _available_choices(launcher_path: Path, group: str) -> str:
    root = Path(__file__).resolve().parents[2] / "conf" / group
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")) if root.is_dir() else []
    return ", ".join(names) or "none"


def stage_names(cfg: DictConfig, groups) -> list[str]:
    stages = cfg.get("stages")
    if not isinstance(stages, (list, ListConfig)) or not stages:
        raise config_error(
            "stages", stages, "list the stages to run, e.g. stages=[training] or stages=[data_preparation,training]"
        )
    names = [str(name) for name in stages]
    for name in names:
        if name not in STAGES and name not in groups:
            raise config_error("stages", names, f"unknown stage {name!r}; known stages: {', '.join(STAGES)}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise config_error("stages", names, f"list each stage once (repeated: {', '.join(duplicates)})")
    return names


def build_plan(cfg: DictConfig, choices: dict[str, str | None]) -> Plan:
    """Validates everything and renders every script in memory. Writes nothing."""
    context = read_context(cfg)
    backend = backend_class(context.cluster_type)(context)
    specs_by_stage = []
    names = stage_names(cfg, choices)
    check_same_family(cfg, choices, names)
    models = PipelineModels(cfg, choices, names)
    for name in names:
        if cfg.get(name) is None:
            raise config_error(
                name,
                None,
                f"stage {name!r} is listed in stages but its config group is null; pick one on the command line, "
                f"e.g. {name}=<choice> (available: {_available_choices(context.launcher_scripts_path, name)})",
            )
        if name not in STAGES:
            raise config_error(
                "stages", name, f"the {name} stage is not available yet; available stages: {', '.join(STAGES)}"
            )
        stage = stage_class(name)(context, cfg, choices.get(name) or "")
        specs_by_stage.append(stage.job_specs())
        # The stage's own schema passed; now the model it will load, as the stages before it leave it.
        models.add(name, specs_by_stage[-1])
        # A tuning stage's model is known only now: its prediction (and memory check) comes with it.
        specs_by_stage[-1] = stage.with_loaded_model(specs_by_stage[-1], models.loaded.get(name))
    backend.validate(specs_by_stage)
    check_input_paths(specs_by_stage)
    if context.check_inputs:
        check_inputs(specs_by_stage, dry_run=context.debug)
    refuse_what_does_not_fit(specs_by_stage, context)
    jobs = [
        [PlannedJob(spec, backend.script_path(spec), backend.render(spec)) for spec in specs]
        for specs in specs_by_stage
    ]
    return Plan(context, backend, jobs)


def write_plan(plan: Plan, argv: Sequence[str], root: Path | None = None) -> None:
    """Creates each job directory with its resolved config, its script and the launcher command line. Files
    whose bytes would not change are left untouched; with `root`, everything goes to that mirror instead."""
    command_line = " \\\n  ".join(shlex.quote(word) for word in argv) + "\n"
    base = plan.context.base_results_dir
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            directory = mirrored(job.spec.directory, root, base)
            make_directories(directory)
            for path, text in job.spec.files:
                target = mirrored(path, root, base)
                make_directories(target.parent)
                write_if_changed(target, text)
            write_if_changed(mirrored(job.script_path, root, base), job.script, 0o755)
            write_if_changed(directory / "launcher_cmd.log", command_line)


def submit_plan(plan: Plan, ledger=None) -> list[Submitted]:
    """Submits in order; stage k+1 waits for stage k. All or nothing: if anything stops a real submission after
    it began (a failed sbatch, Ctrl-C, SIGTERM, a failed write, any error), every job it queued is cancelled
    (rollback.py) and SubmissionError says what stopped it. With a ledger, records each job as it is submitted
    (or run here) and closes the record with the outcome."""
    if plan.context.debug:
        return _placeholders(plan)
    from .interrupts import signals_raised  # real runs only: a dry run leaves the signal handlers alone

    submission_id = ledger.id if ledger is not None else f"unrecorded-{os.urandom(4).hex()}"
    submitted: list[Submitted] = []
    with signals_raised():
        try:
            _submit_each(plan, ledger, submission_id, submitted)
            _record(ledger, "close", "submitted" if plan.backend.queues_jobs else "finished")
        except BaseException as cause:
            from .rollback import roll_back, stop_here

            if plan.backend.queues_jobs:
                raise roll_back(plan, submitted, ledger, cause) from None
            raise stop_here(plan, submitted, ledger, cause) from None
    return submitted


def _submit_each(plan: Plan, ledger, submission_id: str, submitted: list[Submitted]) -> None:
    from .slurm_tags import submission_tag

    previous_id: str | None = None
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            index = len(submitted)
            waits = waits_of(job.spec, previous_id)
            if plan.backend.queues_jobs:
                job_id = plan.backend.submit(job.script_path, job.spec, waits, tag=submission_tag(submission_id, index))
                _record(ledger, "submitted", index, job_id, plan.backend.dependency_words(waits))
            else:
                job_id = _run_here(plan, job, waits, ledger, index)
            submitted.append(Submitted(job, job_id, waits))
            previous_id = job_id if plan.backend.queues_jobs else None


def waits_of(spec: JobSpec, previous_id: str | None) -> tuple[Wait, ...]:
    """The job's waits with the job before it bound: the pipeline's one piece of dependency logic."""
    return ((Wait(spec.after_previous, (previous_id,)),) if previous_id else ()) + spec.waits


def _placeholders(plan: Plan) -> list[Submitted]:
    """A dry run's plan: DRYRUN-<n> ids, chained as a queue would chain them."""
    submitted: list[Submitted] = []
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            previous = submitted[-1].job_id if submitted else None
            submitted.append(Submitted(job, f"DRYRUN-{len(submitted) + 1}", waits_of(job.spec, previous)))
    return submitted


def _record(ledger, event: str, *args) -> None:
    """Tells the ledger, when one is kept (real runs; not dry runs nor tests that submit a plan directly)."""
    if ledger is not None:
        getattr(ledger, event)(*args)


def _run_here(plan: Plan, job: PlannedJob, waits: tuple[Wait, ...], ledger, index: int) -> str | None:
    """Backends without a queue run the job to completion in submit(); the ledger gets its exit code either way."""
    _record(ledger, "started", index, plan.backend.dependency_words(waits))
    try:
        job_id = plan.backend.submit(job.script_path, job.spec, waits)
    except StageFailed as error:
        _record(ledger, "finished", index, error.exit_status)
        raise
    except StageInterrupted as error:
        _record(ledger, "finished", index, error.exit_code)
        raise
    _record(ledger, "finished", index, 0)
    return job_id


def _gpus_per_node(plan: Plan, spec: JobSpec) -> str:
    if not spec.uses_gpus:
        return "-"
    if plan.backend.name == "bcm":
        return str(spec.gpus_per_node or plan.context.cluster.get("gpus_per_node") or "-")
    return str(spec.tasks_per_node)  # one process per GPU where no scheduler hands GPUs out


def _array_size(spec: JobSpec) -> str:
    return str(len(spec.array_items)) if spec.is_array else "-"


def format_plan(plan: Plan, submitted: Sequence[Submitted]) -> str:
    # Ids and dependencies exist only where a queue chains the jobs (Slurm, and its dry run).
    queued = plan.backend.queues_jobs
    header = (
        ("stage", "job")
        + (("id", "dependency") if queued else ())
        + ("nodes", "gpus/node", "time", "array", "script", "log")
    )
    rows = [header]
    for entry in submitted:
        spec = entry.job.spec
        ids = (entry.job_id or "-", ",".join(plan.backend.dependency_words(entry.waits)) or "-") if queued else ()
        rows.append(
            (
                spec.stage,
                plan.backend.job_name(spec),
                *ids,
                str(spec.nodes),
                _gpus_per_node(plan, spec),
                plan.backend.time_words(spec),
                _array_size(spec),
                str(entry.job.script_path),
                plan.backend.log_pattern(spec, entry.job_id),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    mode = (
        "dry run (NEMO_LAUNCHER_DEBUG): nothing was submitted"
        if plan.context.debug
        else f"cluster_type={plan.context.cluster_type}"
    )
    results = ["", "Results:"]
    for jobs in plan.jobs_by_stage:
        directories = [str(job.spec.directory) for job in jobs]
        results.append(f"  {jobs[0].spec.stage}: {os.path.commonpath(directories)}")
    notes = [f"  {note}" for jobs in plan.jobs_by_stage for job in jobs for note in job.spec.notes]
    predicted = [job for jobs in plan.jobs_by_stage for job in jobs if job.spec.prediction is not None]
    predictions = ["", *plan_lines(predicted, gpu_type_of(plan.context))] if predicted else []
    return f"Pipeline, {mode}\n" + "\n".join(lines + results + predictions + (["", "Notes:", *notes] if notes else []))


def launch(cfg: DictConfig, choices: dict[str, str | None], argv: Sequence[str]) -> list[Submitted]:
    plan = build_plan(cfg, choices)
    if plan.context.debug:
        root = dry_run_root(plan)
        if root is not None:
            print(
                f"Dry run: these directories belong to a submitted run and stay untouched; the dry run's files "
                f"are in {root}",
                flush=True,
            )
        else:
            check_run_directories(plan, real_run=False)
        write_plan(plan, argv, root)
        submitted = submit_plan(plan)
        print(format_plan(plan, submitted), flush=True)
        return submitted
    plan.backend.check_environment()
    if plan.context.preflight and plan.backend.queues_jobs:
        _run_preflight(cfg)
    check_run_directories(plan, real_run=True)
    from .ledger import open_ledger  # dry runs record nothing and do not pay for it
    from .run_lock import hold_run_lock

    # From the live-run check to the last job queued (or run here), no other launcher works on these directories.
    with hold_run_lock(plan, argv):
        guard_live_runs(plan, bool(cfg.get("resubmit_while_running", False)))
        write_plan(plan, argv)
        ledger = open_ledger(plan, argv)
        submitted = submit_plan(plan, ledger)
    print(format_plan(plan, submitted), flush=True)
    from .monitor import follow_up_commands

    print(follow_up_commands(ledger.id, plan.context.base_results_dir), flush=True)
    return submitted


def _run_preflight(cfg: DictConfig) -> None:
    from .preflight import run_preflight  # only clusters that ask for it pay for the checks

    failures = [check for check in run_preflight(cfg) if not check.ok]
    if failures:
        details = "; ".join(f"{check.name}: {check.fix}" for check in failures)
        raise LauncherError(f"preflight failed before submitting anything: {details}")
