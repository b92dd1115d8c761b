"""Writes that fail for lack of space or permission: said in one line with the path and the sizes, exit 74.

    free_bytes(folder)                                   -> bytes this user may still write there
    check_room(folder, needed, "checkpoint step-40", advice)     # raises StorageFault when free < needed
    fault = storage_fault(error, folder, needed, "checkpoint step-40", advice)   # after a failed write, or None
    with guarded_write(folder, needed, "the fine-tuned model", advice):          # both around one write
        torch.save(state, folder / "model.pt")

A full disk rarely says so by the time the error reaches the job: torch.save reports ENOSPC as
`[enforce fail at inline_container.cc:672] unexpected pos 704 vs 598`, and dist_checkpointing's writer
processes hand back whatever their writes raised. So a failed write counts as a full disk when an errno in
its chain says so, or when the file system has next to nothing left right after it failed.

Standard library only.
"""

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from ...contract import STORAGE_FAULT_EXIT_CODE
from .report import JobFault, size

# Writes fail in pieces of at most this much (a buffer, one tensor's chunk): a file system with less than this
# left after a write failed is full, whatever the error said. Above it, the failure had another cause.
FULL_SLACK_BYTES = 64 * 2**20

_SPACE_ERRNOS = {errno.ENOSPC: "no space left on the file system", errno.EDQUOT: "disk quota exceeded"}
_ACCESS_ERRNOS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
}


class StorageFault(JobFault):
    """A write failed (or would fail) for lack of space or permission."""

    exit_code = STORAGE_FAULT_EXIT_CODE


def existing_ancestor(path) -> Path:
    """`path` or its nearest parent that exists (a folder about to be created lives on its parent's file system)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path` (what `df` shows as Avail)."""
    stats = os.statvfs(existing_ancestor(path))
    return stats.f_bavail * stats.f_frsize


def with_margin(num_bytes: int) -> int:
    """Room to ask for before writing about `num_bytes`: 10% more, plus 16 MiB for metadata and the logs
    written meanwhile."""
    return int(num_bytes * 1.10) + 16 * 2**20


def check_room(folder, needed: int, what: str, advice: str) -> None:
    """Raises StorageFault when the file system of `folder` has less than `needed` bytes free."""
    free = free_bytes(folder)
    if free < needed:
        raise StorageFault(
            f"no space for {what} in {folder}: it needs about {size(needed)}, the file system has "
            f"{size(free)} free. {advice}"
        )


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and everything it carries: causes, contexts, and the per-rank failures of a checkpoint
    exception (torch.distributed.checkpoint gathers them in `.failures`)."""
    seen, pending = set(), [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):
            pending += [value for value in failures.values() if isinstance(value, BaseException)]
        pending += [arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException)]


def storage_errno(error: BaseException) -> OSError | None:
    """The OSError in `error`'s chain that is about space or permission, if any."""
    for item in _chain(error):
        if isinstance(item, OSError) and item.errno in {**_SPACE_ERRNOS, **_ACCESS_ERRNOS}:
            return item
    return None


def storage_fault(error: BaseException, folder, needed: int, what: str, advice: str) -> StorageFault | None:
    """The StorageFault that explains a failed write of `what` into `folder`, or None when space and
    permission are not the cause (a real crash: let it raise). Call it before removing what the failed
    write left behind: that is what filled the disk."""
    cause = storage_errno(error)
    free = free_bytes(folder)
    if cause is not None and cause.errno in _ACCESS_ERRNOS:
        where = cause.filename or folder
        return StorageFault(
            f"cannot write {what} to {folder}: {_ACCESS_ERRNOS[cause.errno]} ({where}). Give this "
            f"job's user write access there, or write elsewhere (another base_results_dir)."
        )
    if cause is not None or free < min(needed, FULL_SLACK_BYTES):
        reason = _SPACE_ERRNOS[cause.errno] if cause is not None else "the file system is full"
        return StorageFault(
            f"{what} could not be written to {folder}: {reason} (it needs about {size(needed)}, "
            f"{size(free)} free when the write failed). {advice}"
        )
    return None


def write_fault(cause: OSError, folder) -> StorageFault:
    """A StorageFault for an OSError about space or permission that reached a job program's top level."""
    where = cause.filename or folder
    if cause.errno in _ACCESS_ERRNOS:
        return StorageFault(
            f"cannot write {where}: {_ACCESS_ERRNOS[cause.errno]}. Give this job's user write access "
            f"there, or write elsewhere (another base_results_dir)."
        )
    return StorageFault(
        f"cannot write {where}: {_SPACE_ERRNOS[cause.errno]} ({size(free_bytes(folder))} free). "
        f"Free space there, or write elsewhere (another base_results_dir), then submit the same "
        f"command again."
    )


@contextlib.contextmanager
def guarded_write(folder, needed: int, what: str, advice: str):
    """check_room before the block; a failure inside it that space or permission explains becomes that
    StorageFault. The block must leave no partial result behind (write under a temporary name, then rename)."""
    check_room(folder, needed, what, advice)
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # torch.distributed.checkpoint's CheckpointException is no Exception
        fault = storage_fault(error, folder, needed, what, advice)
        if fault is None:
            raise
        raise fault from error
