"""Records left `submitting` by a launcher that died (kill -9, a lost login node) mid-submission.

sbatch runs in its own session (backends/slurm.py), so a launcher killed while sbatch talks to the controller
does not stop the job from being queued, and nobody writes its id to the ledger. The record does hold, from
before the first sbatch, every job's tag and who the launcher was (host, pid, the pid's start time). Whoever
reads the ledger next (`status`, `cancel`, `logs`, a new submission) finds such a record, asks squeue once
for its tags, writes the ids of the jobs that were queued into the record and closes it: `submitted` when every
job was found, `abandoned` when the launcher died before queueing the rest. Only then does it decide anything,
so the jobs are seen, cancelled and never queued a second time.

A launcher is known to be gone when the record was written on this host and its pid is no longer the same
process, or, from any host, when the record has said `submitting` for longer than any submission takes.
"""

import contextlib
import socket
import sys
import time
from datetime import datetime

from ..contract.processes import process_alive
from .errors import LauncherError

# A submission is a few sbatch calls with retries: minutes at the very most. Past this a record still saying
# `submitting` cannot belong to a live launcher, whichever host it ran on.
ABANDONED_AFTER_S = 3600


def launcher_gone(record: dict, now: float | None = None) -> bool:
    """Whether a Slurm record still saying `submitting` was left by a launcher that no longer runs."""
    if record.get("state") != "submitting" or record.get("cluster_type") != "bcm":
        return False
    pid = record.get("launcher_pid")
    if record.get("host") == socket.gethostname() and type(pid) is int:
        return not process_alive(pid, record.get("launcher_started"))
    try:
        age = (now or time.time()) - datetime.fromisoformat(record["created"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return False
    return age > ABANDONED_AFTER_S


def adopt_abandoned(base_results_dir, records: list[dict]) -> None:
    """Completes, in place and on disk, the whole records in `records` whose launcher died while submitting."""
    abandoned = [record for record in records if launcher_gone(record) and _untold(record)]
    if not abandoned:
        return
    from .slurm_tags import tagged_jobs

    try:
        queued = {job.tag: job for job in tagged_jobs(include_ended=True)}
    except LauncherError as error:
        ids = ", ".join(record["id"] for record in abandoned)
        print(
            f"Warning: the launcher of pipeline {ids} died while submitting, and its jobs cannot be looked up "
            f"({error}); status and cancel show only the jobs it recorded",
            file=sys.stderr,
        )
        return
    for record in abandoned:
        _adopt(base_results_dir, record, queued)


def _untold(record: dict) -> list[dict]:
    return [job for job in record["jobs"] if not job.get("job_id") and job.get("tag")]


def _adopt(base_results_dir, record: dict, queued: dict) -> None:
    from .ledger import ledger_dir, save_record

    adopted = []
    for job in _untold(record):
        found = queued.get(job["tag"])
        if found is not None:
            job["job_id"] = found.job_id
            adopted.append(f"{found.job_id} ({job['stage']})")
    missing = [job["stage"] for job in record["jobs"] if not job.get("job_id")]
    record["state"] = "abandoned" if missing else "submitted"
    record["adopted"] = [word.split()[0] for word in adopted]
    with contextlib.suppress(LauncherError):  # another user's read-only record: adopted in memory, for this command
        save_record(ledger_dir(base_results_dir) / f"{record['id']}.json", record)
    found_words = f"found {', '.join(adopted)} queued under its tags" if adopted else "found none of its jobs queued"
    rest = f"; never submitted: {', '.join(missing)}" if missing else ""
    print(
        f"Note: the launcher of pipeline {record['id']} (pid {record.get('launcher_pid')} on {record.get('host')}) "
        f"died while submitting; {found_words}{rest}; the record now says {record['state']}",
        file=sys.stderr,
    )
