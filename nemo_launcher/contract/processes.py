"""Whether a process recorded earlier still runs on this host: its pid, told apart from a later process that was
given the same pid by the start time /proc records for it. Standard library only; the job's run-directory lock
(jobs/common/run_lock.py) and the launcher's ledger (launch/orphans.py) both record and ask it."""

import os
from pathlib import Path


def process_start_time(pid: int) -> str | None:
    """The start time of process `pid` as /proc gives it, or None (no such process, or no /proc here)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; the fields after it are plain.
    return text.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int, started: str | None) -> bool:
    """Whether process `pid` of this host still runs and is the one that started at `started`."""
    if started is not None and Path("/proc/self/stat").exists():
        return process_start_time(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
