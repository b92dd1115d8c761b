"""A backend renders a job spec into a script and runs or submits it. It knows nothing about models."""
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..context import LaunchContext
from ..job_spec import Command, JobSpec
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

    def __init__(self, context: LaunchContext):
        self.context = context
        # What this command queued, for a rollback: submission tag -> job id. Backends without a queue leave it empty.
        self.queued: Dict[str, str] = {}

    def job_name(self, spec: JobSpec) -> str:
        return spec.name

    def log_base(self, spec: JobSpec) -> Path:
        """Logs are `<job dir>/log-<job name>_<attempt tag>.out`; each backend adds its own attempt tag."""
        return spec.directory / f"log-{self.job_name(spec)}"

    def script_path(self, spec: JobSpec) -> Path:
        return spec.directory / f"{self.job_name(spec)}_submission.sh"

    @abstractmethod
    def log_pattern(self, spec: JobSpec, job_id: Optional[str]) -> str:
        """Where the job's output will be, for the plan printed after submission."""

    @abstractmethod
    def render(self, spec: JobSpec) -> str:
        """The whole script text. Pure: the same spec gives byte-identical text."""

    def validate(self, specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
        """Refuses pipelines this backend cannot run; raises ConfigError before anything is written."""

    def check_environment(self) -> None:
        """Refuses to start when the tools this backend needs are missing (skipped in dry runs)."""

    @abstractmethod
    def submit(self, script: Path, spec: JobSpec, dependency: List[str], tag: Optional[str] = None) -> Optional[str]:
        """Submits (or runs) the script; returns a job id when the backend queues jobs. `tag` is unique to this
        submission of this job: a queueing backend records it with the job, so that an ambiguous failure can be
        looked up instead of queueing the job twice."""

    def settle(self) -> Optional[str]:
        """Before a rollback: makes `queued` complete (a queueing backend looks up the submissions whose outcome
        it does not know). Returns why that failed, or None."""
        return None

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancels jobs this command submitted (atomic submission rolls back with it)."""

    def environment_lines(self, spec: JobSpec) -> List[str]:
        """`export NAME=value` lines shared by the backends: the global env, then the stage's own."""
        pairs = dict(self.context.env)
        pairs.update(spec.env)
        lines = [f"export {name}={quote(value)}" for name, value in pairs.items()]
        lines.append(f"export PYTHONPATH={quote(str(self.context.launcher_scripts_path))}" + '"${PYTHONPATH:+:${PYTHONPATH}}"')
        # Read on the node when the job starts, so no secret lands in a script or a log.
        return lines + export_lines(dict(self.context.secret_files), quote)

    def exported_names(self, spec: JobSpec) -> List[str]:
        names = [name for name, _ in self.context.env] + [name for name, _ in spec.env]
        names.append("PYTHONPATH")
        names += [name for name, _ in self.context.secret_files]
        return list(dict.fromkeys(names))
