"""Immutable submissions: the files a submitted job reads are never rewritten.

- A real submission whose job directories hold a run with jobs still queued or running is refused, naming their
  ids (`resubmit_while_running=true` submits anyway; then a file those jobs read may only be written again
  with the same bytes).
- A file whose bytes would not change is not written at all (its inode and time stay), so resubmitting the
  same command after a cancel leaves what the first submission wrote as it was, and resumes from its checkpoints.
- A dry run never writes into the directories of a submitted run: its files go to a mirror under
  `<base_results_dir>/.dryrun/<time>/`.

The ledger (`ledger.py`) says which directories belong to submitted runs.
"""

import contextlib
import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from .errors import RunInProgress
from .writes import write_atomically

DRY_RUN_DIR = ".dryrun"


def planned_files(plan) -> dict[Path, str]:
    """Every file the plan writes that a job reads: resolved configs and scripts."""
    files: dict[Path, str] = {}
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            files.update({Path(path): text for path, text in job.spec.files})
            files[Path(job.script_path)] = job.script
    return files


def records_touching(base_results_dir: Path, directories: Iterable[Path]) -> list[dict]:
    """Ledger records of earlier submissions with a job in one of `directories` (damaged ones are warned of)."""
    from .ledger import ledger_dir, load_pipelines

    if not ledger_dir(base_results_dir).is_dir():  # the usual first run: no ledger, nothing to read
        return []
    return _touching(load_pipelines(base_results_dir), directories)


def _touching(records: list[dict], directories: Iterable[Path]) -> list[dict]:
    wanted = {str(directory) for directory in directories}
    return [record for record in records if any(job.get("directory") in wanted for job in record["jobs"])]


def guard_live_runs(plan, resubmit_while_running: bool) -> None:
    """Refuses a submission into directories whose earlier jobs are still live. The ledger names them; on a queue,
    Slurm's own list of the launcher's tagged jobs (one squeue call, slurm_tags.py) names them too, so a damaged,
    deleted or never-written record hides nothing. Where jobs run here, a damaged record that may hide jobs
    refuses every submission."""
    from .ledger import ledger_dir, live_jobs, read_ledger

    base_results_dir = plan.context.base_results_dir
    directories = [job.spec.directory for jobs in plan.jobs_by_stage for job in jobs]
    records, damages = read_ledger(base_results_dir) if ledger_dir(base_results_dir).is_dir() else ([], [])
    for damage in damages:
        print(damage.warning(), file=sys.stderr)
    hiding = [damage for damage in damages if damage.hides_jobs]
    if hiding and not plan.backend.queues_jobs and not resubmit_while_running:
        # A job entry that cannot be read may name live jobs in any directory, this run's included.
        named = "; ".join(f"{damage.path} ({damage.describe()})" for damage in hiding)
        raise RunInProgress(
            f"damaged ledger records may name jobs still running here: {named}. Inspect them (ps on the host "
            "that ran them), then repair or remove each file, or set resubmit_while_running=true to submit anyway"
        )
    records = _touching(records, directories)
    live = [
        (job.get("job_id") or f"pid {job.get('pid')}", f"{job['stage']} {job['job_name']}", state, job["directory"])
        for job, state in (live_jobs(records) if records else [])
    ]
    owners = [record["id"] for record in records]
    known = {job_id for job_id, *_ in live}
    for tagged in plan.backend.live_jobs_in(directories):
        owners.append(tagged.pipeline_id)
        if tagged.job_id not in known:
            live.append((tagged.job_id, f"{tagged.name}, no ledger entry", tagged.state, tagged.directory))
    if not live:
        return
    described = ", ".join(f"{job_id} ({what}, {state})" for job_id, what, state, _ in live)
    owners = list(dict.fromkeys(owners))
    if not resubmit_while_running:
        raise RunInProgress(
            f"jobs of this run are still queued or running: {described}. Wait for them, cancel them "
            f"(python3 -m nemo_launcher cancel {owners[0]}), or set resubmit_while_running=true to queue more "
            f"behind them (pipelines: {', '.join(owners)})"
        )
    files = planned_files(plan)
    live_directories = {directory for *_, directory in live}
    for path, text in files.items():
        if str(path.parent) in live_directories and path.is_file() and path.read_bytes() != text.encode("utf-8"):
            raise RunInProgress(
                f"{path}: live jobs read this file ({described}) and this submission would change it; "
                "submit under another run name, or cancel them first"
            )


def dry_run_root(plan) -> Path | None:
    """Where a dry run writes instead of the job directories: None when no submitted run owns them."""
    directories = [job.spec.directory for jobs in plan.jobs_by_stage for job in jobs]
    if not records_touching(plan.context.base_results_dir, directories):
        return None
    return plan.context.base_results_dir / DRY_RUN_DIR / datetime.now().strftime("%Y%m%d_%H%M%S_%f")


def mirrored(path: Path, root: Path | None, base_results_dir: Path) -> Path:
    """`path` as a dry run writes it: unchanged, or at the same place under the mirror `root`."""
    if root is None:
        return path
    try:
        return root / path.relative_to(base_results_dir)
    except ValueError:
        return root / "outside_base_results_dir" / path.relative_to(path.anchor)


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Writes `text` atomically unless the file already holds exactly these bytes and mode; returns whether it
    wrote. A failed write raises WriteError naming `path` and leaves no temporary file (writes.py)."""
    data = text.encode("utf-8")
    with contextlib.suppress(OSError):  # no such file (or unreadable): write it
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
    write_atomically(path, data, mode)
    return True
