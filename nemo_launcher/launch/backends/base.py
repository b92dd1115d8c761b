"""A backend renders a job spec into a script and runs or submits it. It knows nothing about models.

A new backend is a subclass here plus a row in backends/__init__.py, and it must pass the shared suite
tests/launch/backend_contract.py (one small subclass of BackendContract per backend).
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from ...contract.durations import clock_text
from ...contract.file_numbers import compress_ranges
from ..context import LaunchContext
from ..errors import config_error
from ..job_spec import Command, Dependency, JobSpec, Wait
from ..local_gpus import check_local_gpus
from ..secrets import export_lines
from ..shell import join, quote

# Scripts are built as line lists in Python (as submitit does): importing a template engine would cost more
# than all of the launcher's own work in a dry run.
# The interpreter is chosen when the script runs, not when it is written: the interactive backend points it
# at the launcher's own Python, a cluster user can export it, and scripts stay byte-identical everywhere.
PYTHON = '"${NEMO_LAUNCHER_PYTHON:-python3}"'


def python_words(command: Command) -> str:
    """`"${NEMO_LAUNCHER_PYTHON:-python3}" -u -m module args...` with every argument quoted."""
    return f"{PYTHON} -u -m {quote(command.module)} {join(command.args)}".rstrip()


class Backend(ABC):
    """Renders scripts (pure), then submits or runs them. Subclasses: slurm, bcp, interactive."""

    name: str = ""
    # Whether submit() returns ids that later jobs can depend on (a queue) or runs jobs to completion here.
    queues_jobs: bool = False
    # The dependency kinds this backend honours between the jobs of one pipeline; validate() refuses the others.
    # A backend that runs jobs here, in order, stopping at the first failure, honours waiting for success
    # (per item too: every item has ended) and singleton (one job at a time), nothing else.
    pipeline_kinds: frozenset[Dependency] = frozenset(
        {Dependency.AFTER_SUCCESS, Dependency.AFTER_CORRESPONDING_ITEM, Dependency.SINGLETON}
    )
    # Whether a job may wait for outside jobs (ids named in run.dependency): only where a queue knows them.
    waits_for_outside_jobs: bool = False

    def __init__(self, context: LaunchContext):
        self.context = context
        # What this command queued, for a rollback: submission tag -> job id. Backends without a queue leave it empty.
        self.queued: dict[str, str] = {}

    def job_name(self, spec: JobSpec) -> str:
        return spec.name

    def live_jobs_in(self, directories: Sequence[Path]) -> list:
        """The scheduler's live jobs (slurm_tags.TaggedJob) that the launcher queued in `directories`, whatever
        the ledger says. Backends without a queue have none beyond what the ledger records."""
        return []

    def log_base(self, spec: JobSpec) -> Path:
        """Logs are `<job dir>/log-<job name>_<attempt tag>.out`; each backend adds its own attempt tag."""
        return spec.directory / f"log-{self.job_name(spec)}"

    def script_path(self, spec: JobSpec) -> Path:
        return spec.directory / f"{self.job_name(spec)}_submission.sh"

    @abstractmethod
    def log_pattern(self, spec: JobSpec, job_id: str | None) -> str:
        """Where the job's output will be, for the plan printed after submission."""

    @abstractmethod
    def render(self, spec: JobSpec) -> str:
        """The whole script text. Pure: the same spec gives byte-identical text."""

    def validate(self, specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
        """Refuses pipelines this backend cannot run; raises ConfigError before anything is written. Subclasses
        that add checks call this too."""
        specs = [spec for stage_specs in specs_by_stage for spec in stage_specs]
        for position, spec in enumerate(specs):
            # (wait, whether it names an outside job): the job before it in the pipeline, then the spec's own.
            waits = [(Wait(spec.after_previous, ("<previous job>",)), False)] if position else []
            waits += [(wait, bool(wait.job_ids)) for wait in spec.waits]
            for wait, outside in waits:
                if wait.kind not in self.pipeline_kinds or (outside and not self.waits_for_outside_jobs):
                    raise config_error(
                        f"{spec.stage}.run.dependency",
                        self.dependency_words([wait])[0],
                        f"cluster_type={self.name} runs the jobs here, one after another, stopping at the first "
                        "failure, and cannot wait that way: leave run.dependency null or singleton, or use "
                        "cluster_type=bcm",
                    )
        if not self.queues_jobs:
            # No scheduler hands out GPUs here: the jobs start on this machine (or this NGC job's replicas).
            check_local_gpus(specs_by_stage, self.name, dry_run=self.context.debug)

    def dependency_words(self, waits: Sequence[Wait]) -> list[str]:
        """How the plan and the ledger show a job's dependencies; a queue says them in its own words."""
        return [":".join((wait.kind.value, *wait.job_ids)) for wait in waits]

    def array_words(self, spec: JobSpec) -> str | None:
        """How the plan and the ledger show an array's items ("0-29"); None for a single job."""
        return compress_ranges(spec.array_items) if spec.is_array else None

    def time_words(self, spec: JobSpec) -> str:
        """How the plan shows the time limit."""
        return clock_text(int(spec.time_limit.total_seconds()))

    def check_environment(self) -> None:
        """Refuses to start when the tools this backend needs are missing (skipped in dry runs)."""

    @abstractmethod
    def submit(self, script: Path, spec: JobSpec, waits: Sequence[Wait], tag: str | None = None) -> str | None:
        """Submits (or runs) the script; returns a job id when the backend queues jobs. `waits` are the spec's
        own waits plus the job before it, bound by the pipeline (queueing backends only). `tag` is unique to this
        submission of this job: a queueing backend records it with the job, so that an ambiguous failure can be
        looked up instead of queueing the job twice."""

    def settle(self) -> str | None:
        """Before a rollback: makes `queued` complete (a queueing backend looks up the submissions whose outcome
        it does not know). Returns why that failed, or None."""
        return None

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancels jobs this command submitted (atomic submission rolls back with it)."""

    def environment_lines(self, spec: JobSpec) -> list[str]:
        """`export NAME=value` lines shared by the backends: the global env, then the stage's own."""
        pairs = dict(self.context.env)
        pairs.update(spec.env)
        lines = [f"export {name}={quote(value)}" for name, value in pairs.items()]
        lines.append(
            f"export PYTHONPATH={quote(str(self.context.launcher_scripts_path))}" + '"${PYTHONPATH:+:${PYTHONPATH}}"'
        )
        # Read on the node when the job starts, so no secret lands in a script or a log.
        return lines + export_lines(dict(self.context.secret_files), quote)

    def exported_names(self, spec: JobSpec) -> list[str]:
        names = [name for name, _ in self.context.env] + [name for name, _ in spec.env]
        names.append("PYTHONPATH")
        names += [name for name, _ in self.context.secret_files]
        return list(dict.fromkeys(names))
