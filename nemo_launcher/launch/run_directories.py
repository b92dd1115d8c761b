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

from .errors import WriteError, config_error

# Linux file systems (ext4, XFS, Lustre, GPFS, NFS) refuse a file name longer than NAME_MAX bytes and a path longer
# than PATH_MAX. Slurm's own limit on a job name (1024 characters) is never the tighter one: the job name
# (cluster.job_name_prefix + run.name) is part of a log file name.
NAME_MAX = 255
PATH_MAX = 4096
# Room for what a backend appends to a log's base name when the job runs: job id, array index and attempt on
# Slurm ("_1234567890_1234567_attempt123.out"), date, time and process id here ("_20260101_120000_1234567.out").
LOG_SUFFIX_ROOM = 40


def check_name_lengths(plan) -> None:
    """Raises ConfigError when a file the plan writes, or a log its jobs will write, would get a name or a path
    longer than the file system takes. Checked before anything is written: otherwise the launcher would stop
    half-way through writing the job directories, or the job would fail to open its log after the queue wait."""
    for jobs in plan.jobs_by_stage:
        run_name = os.path.commonprefix([job.spec.name for job in jobs])
        if len(jobs) > 1:
            run_name = run_name.rstrip("_")  # a chain of steps names its jobs <run.name>_<step>
        # (bytes of the longest name, how that name looks, the job): over every job of the stage, so that the
        # length the message allows is enough for all of them.
        named = []
        for job in jobs:
            spec = job.spec
            log = plan.backend.log_base(spec)
            named.append((len(log.name.encode()) + LOG_SUFFIX_ROOM, Path(plan.backend.log_pattern(spec, None)).name))
            named += [(len(path.name.encode()), path.name) for path in (job.script_path, *(p for p, _ in spec.files))]
            deepest = max([len(str(log).encode()) + LOG_SUFFIX_ROOM] + [len(str(p).encode()) for p, _ in spec.files])
            if deepest > PATH_MAX:
                raise config_error(
                    f"{spec.stage}.run.results_dir",
                    str(spec.directory),
                    f"too deep: the paths of its files would pass the file system's {PATH_MAX}-byte limit; "
                    "choose a shorter base_results_dir or run.results_dir",
                )
        size, example = max(named)
        if size > NAME_MAX:
            allowed = max(len(run_name.encode()) - (size - NAME_MAX), 0)
            raise config_error(
                f"{jobs[0].spec.stage}.run.name",
                run_name,
                f"too long: file names are made from it ({example.replace(run_name, '<run.name>')}) and a file "
                f"name may have at most {NAME_MAX} bytes; use a name of at most {allowed} bytes"
                + (" (or a shorter cluster.job_name_prefix)" if plan.backend.name == "bcm" else ""),
            )


def check_run_directories(plan, real_run: bool) -> None:
    """Raises WriteError naming the first run directory that exists and is another user's or not writable, and
    ConfigError for a name too long for the file system (check_name_lengths)."""
    check_name_lengths(plan)
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
