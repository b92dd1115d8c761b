"""What the jobs of recorded pipelines are doing now, asking the scheduler as few times as it allows.

    states = poll(records)                  # per record, one JobState per job (aligned with record["jobs"])
    states = poll(records, live_only=True)  # squeue only: enough to tell queued or running from ended

Slurm: ONE `squeue` call covers every job id of every record given, then ONE `sacct --duplicates` call the jobs
squeue no longer lists and those it says were restarted (each attempt's state says why: restarts.py); where
accounting is disabled, ONE `scontrol show job -o` (every job the controller still remembers) instead. A call per
job would cost a controller round trip each, which a busy slurmctld answers in seconds, and `status` of all recent
pipelines would make hundreds of them.
Jobs run here (interactive, bcp): from the exit codes the launcher recorded and whether its pid is alive.
"""

import os
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from ..contract.file_numbers import FileNumbersError, array_task_count, parse_file_numbers
from .errors import LauncherError
from .ledger import _attempt, elapsed_since, log_files
from .restarts import restarts_text

COMMAND_TIMEOUT_S = 60
# Slurm states of a job that still holds or waits for resources; anything else has ended.
LIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
NO_ACCOUNTING = "ENDED (state unknown: no accounting)"
# squeue -O's fields (-o has no letter for the restart count). JobArrayID is -o's %i (123, 123_4, 123_[5-9%2]);
# each field ends in `|` and gives no width, so nothing is padded or cut.
SQUEUE_FIELDS = "JobArrayID:|,State:|,TimeUsed:|,Reason:|,RestartCnt:"


@dataclass(frozen=True)
class JobState:
    state: str  # what `status` shows: RUNNING, COMPLETED, "2 RUNNING, 28 PENDING", NOT RUN, ...
    phase: str  # one word a pipeline summary counts: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, UNKNOWN, ...
    live: bool  # still queued or running: there is something to cancel or follow
    detail: str = "-"  # elapsed time while running, the pending reason, or the exit code once ended
    restarts: str = "-"  # Slurm's restarts and their causes, "2 (time limit, node failure)"; "-" where unknown


def run_command(argv: Sequence[str]):
    """Every scheduler command of `status`, `logs` and `cancel` goes through here (tests count the calls)."""
    import subprocess  # status of a pipeline run here never pays for it

    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        raise LauncherError(
            f"`{argv[0]}` is not on PATH: run this where Slurm's commands are (the login node)"
        ) from None
    except subprocess.TimeoutExpired:
        raise LauncherError(
            f"`{argv[0]}` gave no answer within {COMMAND_TIMEOUT_S} s: the Slurm controller is busy or down; try again"
        ) from None


def on_slurm(record: dict) -> bool:
    return record.get("cluster_type") == "bcm"


def poll(records: Sequence[dict], live_only: bool = False) -> list[list[JobState]]:
    slurm_ids = [job["job_id"] for record in records if on_slurm(record) for job in record["jobs"] if job.get("job_id")]
    tasks, unknown = _slurm_tasks(records, list(dict.fromkeys(slurm_ids)), live_only) if slurm_ids else ({}, "")
    states = []
    for record in records:
        if on_slurm(record):
            states.append([_slurm_job_state(job, tasks.get(str(job.get("job_id"))), unknown) for job in record["jobs"]])
        else:
            states.append(_run_here_states(record))
    return states


# ---- Slurm ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
    """What the scheduler says of one job or array task."""

    state: str
    detail: str
    restarts: int | None = None  # how often Slurm restarted it; None where the source does not say
    earlier: tuple[str, ...] = ()  # sacct's state of each earlier attempt, oldest first (empty without accounting)


def _slurm_tasks(records, ids: list[str], live_only: bool) -> tuple[dict[str, dict[str | None, _Task]], str]:
    """job id -> {array task (None for a plain job): task}, and the state shown for jobs found nowhere."""
    listed = _squeue(ids)
    if live_only:
        return listed, "ENDED"
    # Restarted jobs squeue still lists go to sacct too: only its record of each attempt says why it restarted.
    restarted = [job_id for job_id in ids if any(task.restarts for task in listed.get(job_id, {}).values())]
    expected = {
        str(job["job_id"]): array_task_count(job.get("array"))
        for record in records
        for job in record["jobs"]
        if job.get("job_id")
    }
    # A job squeue lists in full is settled; an array with fewer tasks listed than it has ended in part.
    missing = [job_id for job_id in ids if len(listed.get(job_id, ())) < (expected.get(job_id) or 1)]
    if not missing and not restarted:
        return listed, "UNKNOWN"
    ended, unknown = _ended(missing, restarted, _earliest(records))
    for job_id, tasks in ended.items():
        for task, value in tasks.items():
            fresher = listed.setdefault(job_id, {}).get(task)  # squeue's view is the fresher one
            listed[job_id][task] = value if fresher is None else replace(fresher, earlier=value.earlier)
    return listed, unknown


def _squeue(ids: list[str]) -> dict[str, dict[str | None, _Task]]:
    result = run_command(["squeue", "-h", "-r", "-j", ",".join(ids), "-O", SQUEUE_FIELDS])
    if result.returncode != 0:
        # squeue refuses a single id it no longer knows; several unknown ids just list nothing.
        if "Invalid job id" in result.stderr:
            return {}
        raise LauncherError(f"squeue failed: {(result.stderr or result.stdout).strip()}")
    return _table_tasks(result.stdout, _queue_task)


def _queue_task(state: str, fields: list[str]) -> _Task:
    """squeue's id|state|time used|reason|restart count: a running job's time so far, else the reason it waits."""
    if state == "RUNNING":
        detail = fields[2]
    else:
        detail = f"({fields[3]})" if len(fields) > 3 and fields[3] not in ("", "None") else "-"
    restarts = fields[4].strip() if len(fields) > 4 else ""
    return _Task(state, detail, int(restarts) if restarts.isdigit() else None)


def _accounting_task(state: str, fields: list[str]) -> _Task:
    """sacct's JobID|State|ExitCode|Elapsed|Submit: a live job's time so far, else how it ended."""
    return _Task(state, fields[3] if state in LIVE_STATES and len(fields) > 3 else _exit_text(state, fields[2]))


def _table_tasks(output: str, task_of: Callable[[str, list[str]], _Task]) -> dict[str, dict[str | None, _Task]]:
    """The jobs and tasks of squeue's `|`-separated lines (job id, state, ...); `task_of(state, fields)` reads the
    rest of a line."""
    found: dict[str, dict[str | None, _Task]] = {}
    for job_id, task, state, fields in _lines(output):
        _add(found, job_id, task, task_of(state, fields))
    return found


def _lines(output: str):
    """(job id, array task or None, state word, all fields) of each `|`-separated line of squeue or sacct."""
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 3:
            job_id, task = _split_id(fields[0])
            yield job_id, task, _state_word(fields[1]), fields


def _attempt_tasks(output: str) -> dict[str, dict[str | None, _Task]]:
    """sacct --duplicates' lines: every attempt of a job or task, each with the time it was (re)queued. The newest
    says where it stands; the ones before it, why it restarted."""
    attempts: dict[tuple[str, str | None], list[tuple[str, _Task]]] = {}
    for job_id, task, state, fields in _lines(output):
        submitted = fields[4] if len(fields) > 4 else ""  # ISO times sort as text; sacct's own order if none
        for key in _task_keys(task):
            attempts.setdefault((job_id, key), []).append((submitted, _accounting_task(state, fields)))
    found: dict[str, dict[str | None, _Task]] = {}
    for (job_id, task), timed in attempts.items():
        tasks = [attempt for _, attempt in sorted(timed, key=lambda pair: pair[0])]  # stable: ties keep sacct's order
        earlier = tuple(attempt.state for attempt in tasks[:-1])
        found.setdefault(job_id, {})[task] = replace(tasks[-1], restarts=len(earlier), earlier=earlier)
    return found


def _add(found: dict[str, dict[str | None, _Task]], job_id: str, task: str | None, value: _Task) -> None:
    """Records a job, or each task of an array range (pending tasks are listed as one range, `[2-5%2]` or
    `2-5%2`), so that two sources listing the same task count it once."""
    tasks = found.setdefault(job_id, {})
    for key in _task_keys(task):
        tasks.setdefault(key, value)


def _ended(missing: list[str], restarted: list[str], since: str) -> tuple[dict[str, dict[str | None, _Task]], str]:
    """What the jobs squeue no longer lists ended as, and every attempt of those it says were restarted: from sacct,
    or (the ended ones only) from scontrol where accounting is off."""
    ids = ",".join(dict.fromkeys([*missing, *restarted]))
    result = run_command(
        ["sacct", "-n", "-P", "-X", "--duplicates", "-S", since, "-j", ids, "-o", "JobID,State,ExitCode,Elapsed,Submit"]
    )
    if result.returncode == 0:
        return _attempt_tasks(result.stdout), "ENDED (state unknown)"
    message = (result.stderr or result.stdout).strip()
    unknown = (
        NO_ACCOUNTING
        if "disabled" in message.lower()
        else f"ENDED (state unknown: sacct: {message.splitlines()[0] if message else 'failed'})"
    )
    return (_scontrol_jobs(set(missing)) if missing else {}), unknown


def _scontrol_jobs(wanted) -> dict[str, dict[str | None, _Task]]:
    result = run_command(["scontrol", "show", "job", "-o"])
    found: dict[str, dict[str | None, _Task]] = {}
    if result.returncode != 0:
        return found
    for line in result.stdout.splitlines():
        fields = {}
        for word in line.split():
            key, equals, value = word.partition("=")
            if equals and key not in fields:
                fields[key] = value
        job_id = fields.get("ArrayJobId") or fields.get("JobId")
        if job_id not in wanted or "JobState" not in fields:
            continue
        task = fields.get("ArrayTaskId") if fields.get("ArrayJobId") else None
        state = _state_word(fields["JobState"])
        detail = fields.get("RunTime", "-") if state in LIVE_STATES else _exit_text(state, fields.get("ExitCode", ""))
        restarts = fields.get("Restarts", "")
        _add(found, job_id, task, _Task(state, detail, int(restarts) if restarts.isdigit() else None))
    return found


def _slurm_job_state(job: dict, tasks: dict[str | None, _Task] | None, unknown: str) -> JobState:
    if not job.get("job_id"):
        return JobState("NOT SUBMITTED", "NOT SUBMITTED", False)
    if not tasks:
        return JobState(unknown, "UNKNOWN", False)
    if list(tasks) == [None]:
        task = tasks[None]
        # Logs are read only for a job that restarted: `status` of many pipelines globs no folder otherwise.
        restarts = restarts_text(task.restarts, task.earlier, _attempt_logs(job) if task.restarts else {})
        return JobState(task.state, task.state, task.state in LIVE_STATES, task.detail, restarts)
    counts = Counter(task.state for task in tasks.values())
    live = [state for state in counts if state in LIVE_STATES]
    ended = [state for state in counts if state not in LIVE_STATES and state != "COMPLETED"]
    phase = "RUNNING" if "RUNNING" in counts else live[0] if live else ended[0] if ended else "COMPLETED"
    order = sorted(counts, key=lambda state: (state != "RUNNING", state not in LIVE_STATES, state))
    text = ", ".join(f"{counts[state]} {state}" for state in order) if len(counts) > 1 else phase
    known = [task for task in tasks.values() if task.restarts is not None]
    # An array's tasks restart one by one: their restarts added up, the causes sacct gives (no log is read).
    restarts = (
        restarts_text(sum(t.restarts for t in known), [s for t in known for s in t.earlier], {}) if known else "-"
    )
    return JobState(text, phase, bool(live), f"{sum(counts.values())} tasks", restarts)


def _attempt_logs(job: dict) -> dict[int, Path]:
    """attempt number -> the log it wrote (a Slurm job's logs carry their attempt: `..._attempt<n>.out`)."""
    return {_attempt(str(path)): path for path in log_files(job)}


def _split_id(text: str) -> tuple[str, str | None]:
    """'123' -> ('123', None); '123_4' -> ('123', '4'); '123_[5-9%2]' -> ('123', '[5-9%2]');
    '123+0' -> ('123', None)."""
    job_id, _, task = text.strip().partition("_")
    return job_id.split("+")[0], task or None


def _task_keys(task: str | None) -> list[str | None]:
    if task is None or task.isdigit():
        return [task]
    try:
        return [str(number) for number in parse_file_numbers(task.strip("[]").split("%")[0])]
    except FileNumbersError:  # a form we do not expand (steps): one entry
        return [task]


def _state_word(text: str) -> str:
    """'CANCELLED by 1000' -> 'CANCELLED'."""
    words = text.split()
    return words[0].rstrip("+").upper() if words else "UNKNOWN"


def _exit_text(state: str, code: str) -> str:
    """Slurm's 'status:signal' pair as people read it: 'exit 0', 'exit 3', 'signal 9'; nothing for a job
    cancelled before it ran (Slurm reports 0:0 for it)."""
    status, _, signal = code.partition(":")
    if signal and signal != "0":
        return f"signal {signal}"
    if not status or (state == "CANCELLED" and status == "0"):
        return "-"
    return f"exit {status}"


def _earliest(records) -> str:
    """sacct's --starttime: a day before the oldest record, in local time as Slurm reads it (its default start,
    midnight today, would hide yesterday's pipelines)."""
    created = []
    for record in records:
        try:
            created.append(datetime.fromisoformat(record["created"]))
        except (KeyError, TypeError, ValueError):
            continue
    start = (min(created) if created else datetime.now().astimezone()) - timedelta(days=1)
    return start.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


# ---- jobs run here -------------------------------------------------------------------------------------------


def launcher_alive(record: dict, job: dict) -> bool | None:
    """Whether the launcher that runs this job is alive; None when it ran on another host and cannot be asked."""
    if record.get("host") not in (None, socket.gethostname()):
        return None
    pid = job.get("pid")
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _run_here_states(record: dict) -> list[JobState]:
    states = []
    stopped = False  # an earlier job failed or was interrupted: the launcher ran nothing after it
    for job in record["jobs"]:
        code = job.get("exit_code")
        alive = launcher_alive(record, job)
        if code is not None:
            took = elapsed_since(job.get("started"), job.get("ended"))
            state = "COMPLETED" if code == 0 else "FAILED"
            states.append(JobState(state, state, False, f"exit {code} after {took}"))
            stopped = stopped or code != 0
        elif stopped:
            states.append(JobState("NOT RUN", "NOT RUN", False))
        elif alive is None:
            states.append(JobState(f"UNKNOWN (ran on {record.get('host')})", "UNKNOWN", False))
        elif job.get("started"):
            if alive:
                states.append(JobState("RUNNING", "RUNNING", True, elapsed_since(job["started"])))
            else:
                states.append(JobState("INTERRUPTED", "INTERRUPTED", False, "launcher gone, no exit code"))
                stopped = True
        elif alive:
            states.append(JobState("PENDING", "PENDING", True, "(waiting for the job before)"))
        else:
            states.append(JobState("NOT RUN", "NOT RUN", False))
    return states
