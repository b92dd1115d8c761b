"""Refuses, before anything is written, run directories that belong to another user or that this user cannot
write.

Two people who pick the same run name under one shared `base_results_dir` would otherwise both train into one
checkpoint folder (with a group umask, 002) or fail halfway with a PermissionError (with umask 022). A run
directory is each job directory and every directory between it and `base_results_dir`; the ledger directory,
shared by everyone who submits under `base_results_dir`, must be writable too.
"""

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import WriteError


def check_run_directories(plan, real_run: bool) -> None:
    """Raises WriteError naming the first run directory that exists and is another user's or not writable."""
    base = plan.context.base_results_dir
    seen = set()
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            for directory in _run_directories(job.spec.directory, base):
                if directory in seen:
                    continue
                seen.add(directory)
                problem = _problem(directory)
                if problem:
                    raise WriteError(
                        f"run directory {directory} {problem}: use another run name ({job.spec.stage}.run.name) or "
                        f"base_results_dir, or ask the owner"
                    )
    if real_run:
        from .ledger import ledger_dir

        ledger = ledger_dir(base)
        problem = _problem(ledger, shared=True)
        if problem:
            raise WriteError(
                f"ledger directory {ledger} {problem}: everyone who submits under base_results_dir={base} "
                "records there; ask its owner to make it group-writable (chmod g+w), or use another base_results_dir"
            )


def _run_directories(directory: Path, base: Path) -> Iterator[Path]:
    """The job directory, then each parent up to (not including) base_results_dir."""
    yield directory
    for parent in directory.parents:
        if parent == base or base not in parent.parents:
            return
        yield parent


def _problem(directory: Path, shared: bool = False) -> str | None:
    """Why this user may not write into `directory`, or None (also when it does not exist yet)."""
    try:
        info = directory.stat()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    me = os.geteuid()
    if not shared and info.st_uid != me:
        return f"belongs to user {_user_name(info.st_uid)}, not to {_user_name(me)}"
    if os.access(directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        return None
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return "is on a read-only file system"
    owner = "" if info.st_uid == me else f"owner {_user_name(info.st_uid)}, "
    return f"is not writable by {_user_name(me)} ({owner}mode {stat.filemode(info.st_mode)})"


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (containers)
        return f"uid {uid}"
