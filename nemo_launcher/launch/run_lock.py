"""One launcher per run at a time: an advisory lock on each job directory a real submission writes to.

    with hold_run_lock(plan, argv):     # raises RunInProgress (exit 5) naming the launcher that holds it
        guard_live_runs(...); write_plan(...); submit_plan(...)

Without it, two identical commands started together both pass the live-run check (the ledger holds no job id
until the first `sbatch` answers) and both queue a whole pipeline. The lock spans the check and the submission,
so the second command sees either the lock or, once the first has finished, its queued jobs.

The lock is `flock` on `<base_results_dir>/.ledger/locks/<digest of the directory>.lock`: the kernel releases
it when the holder exits however it exits (kill -9 included), so a dead launcher never leaves a stale lock;
Linux NFS clients turn it into a lock the server holds for every host (a crashed host's lock lapses with its
NFS lease). Python opens files close-on-exec, so sbatch and the jobs run here never inherit it. The files stay
(removing a lock file another process is about to open would let two holders lock two different files);
each holds who took it last, for the message the second command prints.
"""

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .errors import RunInProgress, write_error
from .writes import make_directories, writing

LOCKS_DIR = "locks"
# The holder writes who it is right after taking the lock; a reader that finds the file empty waits this long.
_HOLDER_WRITE_WAIT_S = 1.0
# File systems that cannot lock say so with one of these; the submission goes on, unprotected, with a warning.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def lock_path(base_results_dir: Path, directory: Path) -> Path:
    from .ledger import ledger_dir

    digest = hashlib.sha256(os.path.realpath(directory).encode("utf-8")).hexdigest()[:24]
    return ledger_dir(base_results_dir) / LOCKS_DIR / f"{digest}.lock"


@contextlib.contextmanager
def hold_run_lock(plan, argv: Sequence[str]) -> Iterator[None]:
    """Holds the lock of every job directory of `plan` until the block ends; raises RunInProgress when another
    launcher holds one of them."""
    base = plan.context.base_results_dir
    directories = sorted({os.path.realpath(job.spec.directory) for jobs in plan.jobs_by_stage for job in jobs})
    with contextlib.ExitStack() as held:
        for directory in directories:
            held.enter_context(_directory_lock(lock_path(base, Path(directory)), directory, argv))
        yield


@contextlib.contextmanager
def _directory_lock(path: Path, directory: str, argv: Sequence[str]) -> Iterator[None]:
    make_directories(path.parent)
    with writing(path):  # a read-only or full disk: one line naming the lock file, exit 6, like every write
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the ledger is shared: so are its locks
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunInProgress(_held_by(path, directory)) from None
        except OSError as error:
            if error.errno not in _NO_LOCKS:
                raise write_error(path, error) from None
            print(
                f"Warning: the file system of {path.parent} cannot lock files ({error.strerror}); two launches "
                "of this run at the same moment could both submit",
                file=sys.stderr,
            )
        else:
            _say_who_holds(descriptor, directory, argv)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _say_who_holds(descriptor: int, directory: str, argv: Sequence[str]) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
        "directory": directory,
        "argv": list(argv),
    }
    # Only for the message another launcher prints: on a full disk the lock holds without it, and the
    # submission's own first write says what is wrong.
    with contextlib.suppress(OSError):
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(holder) + "\n").encode("utf-8"), 0)


def _held_by(path: Path, directory: str) -> str:
    """The refusal: who holds the lock of `directory`, read from its file."""
    holder = None
    deadline = time.monotonic() + _HOLDER_WRITE_WAIT_S
    while holder is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            holder = json.loads(path.read_text())
        if holder is None:
            time.sleep(0.05)
    who = "another launcher"
    if isinstance(holder, dict):
        command = " ".join(str(word) for word in holder.get("argv") or [])
        who = (
            f"another launcher (pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}"
            + (f": {command}" if command else "")
            + ")"
        )
    return (
        f"{who} is submitting this run right now ({directory}); wait for it to finish, then see its pipeline "
        "with `python3 -m nemo_launcher status`"
    )
