"""How often Slurm restarted a job, and why: `status`'s restarts column, e.g. `2 (time limit, node failure)`.

    restarts_text(2, ["REQUEUED", "NODE_FAIL"], {0: Path("log-..._attempt0.out")})  # job_states.py calls it

The count comes from the scheduler (job_states.py asks it once for all jobs): squeue's RestartCnt for a job still
queued or running, the earlier attempts `sacct --duplicates` lists for one that ended, or scontrol's Restarts= where
accounting is disabled (a job the controller still remembers). None of them answering gives "-", not a guess.

The cause of each restart: sacct's state of the earlier attempt says node failure (NODE_FAIL) or preemption
(PREEMPTED); REQUEUED, the state of the job's own requeue (the script requeues a job that stopped early after
saving) and of `scontrol requeue` by hand, says no more, and a cluster without accounting says nothing. The
attempt's own log then says what stopped it (contract/stop_reasons.py): SIGUSR1, the time-limit warning the
launcher asks Slurm for, is "time limit". An attempt that neither source explains shows "unknown".
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..contract.stop_reasons import restart_cause

# sacct's state of an earlier attempt -> the cause `status` shows; states not listed defer to the attempt's log.
SACCT_CAUSES = {
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preemption",
    "BOOT_FAIL": "boot failure",
    "TIMEOUT": "time limit",
}
# The closing summary is the end of an attempt's log; its title is within this many bytes of the end.
LOG_TAIL_BYTES = 16384


def restarts_text(count: int | None, attempt_states: Sequence[str], attempt_logs: Mapping[int, Path]) -> str:
    """`count` restarts (None: unknown); `attempt_states[k]`: sacct's state of attempt k (empty without accounting);
    `attempt_logs[k]`: attempt k's log, where there is one. Causes are listed once each, oldest first."""
    if count is None:
        return "-"
    if count == 0:
        return "0"
    causes = []
    for attempt in range(count):
        state = attempt_states[attempt] if attempt < len(attempt_states) else None
        causes.append(_cause(state, attempt_logs.get(attempt)))
    return f"{count} ({', '.join(dict.fromkeys(causes))})"


def _cause(state: str | None, log: Path | None) -> str:
    if state in SACCT_CAUSES:
        return SACCT_CAUSES[state]
    said = _log_cause(log) if log is not None else None
    if said is not None:
        return said
    return state.lower() if state else "unknown"


def _log_cause(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - LOG_TAIL_BYTES))
            return restart_cause(handle.read().decode("utf-8", errors="replace"))
    except OSError:  # removed or unreadable: the log cannot say
        return None
