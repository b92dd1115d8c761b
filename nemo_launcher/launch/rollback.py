"""All or nothing: what a real submission does when something stops it after it began.

On a queue (Slurm), whatever stops the submission (a failed sbatch, Ctrl-C, SIGTERM, a write that fails on a full
disk, any error) cancels every job this command queued, with one `scancel`: the ones the pipeline recorded, and
the ones the backend queued or adopted before the pipeline heard of them (an sbatch whose answer was cut short,
a launcher.log that could not be written). The ledger record is closed as `rolled_back` and the command exits 3,
saying what interrupted it and which job ids were cancelled. Signals that arrive meanwhile are noted, not acted
on, so a second Ctrl-C cannot abandon the rollback halfway.

Run here (interactive, bcp), there is nothing to cancel: the stage that was running is stopped, the later ones
are not run, and the ledger records how it ended.
"""

import contextlib
import signal

from .errors import LauncherError, StageFailed, StageInterrupted, SubmissionError, WriteError
from .interrupts import describe, signals_deferred


def _index_of(tag: str) -> int:
    return int(tag.rsplit(":", 1)[1])


def _cause(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return f"interrupted by {describe(getattr(error, 'signal_number', signal.SIGINT))}"
    if isinstance(error, LauncherError):
        return str(error)
    return f"unexpected {type(error).__name__}: {error}"


def roll_back(plan, submitted, ledger, cause: BaseException) -> SubmissionError:
    """Cancels everything this command queued and closes the ledger record; returns the error to raise."""
    jobs = [job for stage_jobs in plan.jobs_by_stage for job in stage_jobs]
    backend = plan.backend
    problems: list[str] = []
    with signals_deferred() as noted:
        unsettled = backend.settle()
        if unsettled:
            problems.append(unsettled)
        job_ids = {index: entry.job_id for index, entry in enumerate(submitted) if entry.job_id}
        for tag, job_id in backend.queued.items():
            job_ids.setdefault(_index_of(tag), job_id)
        cancelled = [job_ids[index] for index in sorted(job_ids)]
        try:
            backend.cancel(cancelled)
        except LauncherError as error:
            problems.append(str(error))
        record = _close(ledger, "rolled_back", {index: job_ids[index] for index in job_ids if index >= len(submitted)})
    done = len(submitted)
    where = (
        f"while submitting job {done + 1} of {len(jobs)} ({jobs[done].spec.stage})"
        if done < len(jobs)
        else f"after all {len(jobs)} jobs were submitted"
    )
    what = _cause(cause)
    parts = [f"{what} {where}" if isinstance(cause, KeyboardInterrupt) else f"{what} ({where})"]
    parts.append("rolled back" + ("" if cancelled else ": nothing had been queued"))
    parts += [record] if record else []
    parts += problems
    if noted:
        parts.append(f"{describe(noted[0])} during the rollback was deferred until it finished")
    if cancelled:
        stages = ", ".join(jobs[index].spec.stage for index in sorted(job_ids))
        parts.append(f"cancelled the jobs already submitted ({stages}): {', '.join(cancelled)}")
    return SubmissionError("; ".join(parts))


def stop_here(plan, submitted, ledger, cause: BaseException) -> BaseException:
    """A pipeline run on this machine stopped: records how in the ledger and returns the error to raise."""
    index = len(submitted)
    if isinstance(cause, KeyboardInterrupt):  # between stages, or in a backend that does not stop its job itself
        signal_number = getattr(cause, "signal_number", signal.SIGINT)
        jobs = [job for stage_jobs in plan.jobs_by_stage for job in stage_jobs]
        stage = f"during stage {jobs[index].spec.stage!r}" if index < len(jobs) else "after the last stage"
        cause = StageInterrupted(
            f"interrupted by {describe(signal_number)} {stage}; later stages were not run", signal_number
        )
    state = "interrupted" if isinstance(cause, StageInterrupted) else "failed"
    with signals_deferred("stopping; the ledger is being updated"):
        if ledger is not None and isinstance(cause, StageInterrupted):
            job = ledger.record["jobs"][index] if index < len(ledger.record["jobs"]) else {}
            if job.get("started") and job.get("exit_code") is None:
                with contextlib.suppress(WriteError):  # _close below reports it
                    ledger.finished(index, cause.exit_code)
        record = _close(ledger, state, {})
    if record and isinstance(cause, (StageFailed, StageInterrupted)):
        cause.args = (f"{cause}; {record}",)
    return cause


def _close(ledger, state: str, found_ids) -> str | None:
    """Closes the ledger record as `state`, adding job ids found only now; what to say about it, if anything.
    A record that cannot be written is removed rather than left saying `submitting`."""
    if ledger is None:
        return None
    for index, job_id in found_ids.items():
        ledger.submitted(index, job_id, ledger.record["jobs"][index].get("dependency") or [], save=False)
    try:
        ledger.close(state)
    except WriteError as error:
        gone = "it was removed" if ledger.discard() else f"remove {ledger.path} by hand"
        return f"the ledger record could not be closed ({error}); {gone}"
    return f"ledger record {ledger.id} closed as {state}" if state == "rolled_back" else None
