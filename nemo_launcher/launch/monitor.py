"""What a recorded pipeline is doing, its logs, and cancelling it: the logic of `python3 -m nemo_launcher`.

    python3 -m nemo_launcher status [RUN]        # one pipeline's jobs, or one line per recent pipeline
    python3 -m nemo_launcher logs RUN [STAGE] [-f]
    python3 -m nemo_launcher cancel RUN

RUN is a pipeline id (or a unique prefix of one), or a run or job name: the newest pipeline with it wins.
Everything is read from the ledger (`<base_results_dir>/.ledger/`) and asked of the scheduler in batches
(see job_states); nothing here imports Hydra or torch.
"""

import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, LauncherError
from .job_states import JobState, launcher_alive, on_slurm, poll, run_command
from .ledger import find_pipeline, live_jobs, load_pipelines, log_files, reload
from .slurm_tags import tagged_jobs
from .step_times import step_time_words

RESULTS_ENV = "NEMO_LAUNCHER_RESULTS"
MAX_LISTED = 20  # pipelines `status` without RUN shows
POLL_SECONDS = 3.0  # how often `logs -f` asks whether the job has ended (one squeue call each time)
READ_SECONDS = 0.25  # how often `logs -f` looks for new output in the log file


def default_results_dir() -> Path:
    """NEMO_LAUNCHER_RESULTS, else the base_results_dir of the default config (`<repository>/results`)."""
    if os.environ.get(RESULTS_ENV):
        return Path(os.environ[RESULTS_ENV])
    from .resolvers import REPO_ROOT

    return REPO_ROOT / "results"


def follow_up_commands(pipeline_id: str, base_results_dir: Path) -> str:
    """The three commands printed after a submission, with --results when the run used another directory."""
    results = (
        "" if Path(base_results_dir) == default_results_dir() else f" --results {shlex.quote(str(base_results_dir))}"
    )
    return "\n".join(
        [
            f"Pipeline {pipeline_id}:",
            f"  python3 -m nemo_launcher status {pipeline_id}{results}",
            f"  python3 -m nemo_launcher logs {pipeline_id} [STAGE] [-f]{results}",
            f"  python3 -m nemo_launcher cancel {pipeline_id}{results}",
        ]
    )


# ---- status --------------------------------------------------------------------------------------------------


def status(results: Path, run: str | None = None) -> int:
    if run is None:
        print(_pipelines_table(results))
        return 0
    record = find_pipeline(results, run)
    (states,) = poll([record])
    print(_pipeline_table(record, states))
    return 0


def summary(record: dict, states: Sequence[JobState]) -> str:
    """The pipeline in a few words: `3/3 COMPLETED`, `1 COMPLETED, 1 RUNNING, 1 PENDING`, `FAILED at training`."""
    if record.get("state") == "rolled_back":
        return "ROLLED BACK (a submission failed; its jobs were cancelled)"
    if record.get("state") == "abandoned":  # orphans.py: the jobs found queued were adopted, the rest never queued
        return f"ABANDONED (the launcher died while submitting): {_phases(record, states)}"
    return _phases(record, states)


def _phases(record: dict, states: Sequence[JobState]) -> str:
    phases = [state.phase for state in states]
    if all(phase == "COMPLETED" for phase in phases):
        return f"{len(phases)}/{len(phases)} COMPLETED"
    if not any(state.live for state in states):
        for job, state in zip(record["jobs"], states):
            if state.phase not in ("COMPLETED", "UNKNOWN"):
                return f"{state.phase} at {job['stage']}"
    counts = {}
    for phase in phases:
        counts[phase] = counts.get(phase, 0) + 1
    return ", ".join(f"{count} {phase}" for phase, count in counts.items())


def _pipelines_table(results: Path) -> str:
    records = load_pipelines(results)[:MAX_LISTED]
    if not records:
        return f"No pipeline is recorded in {results}/.ledger (pass --results <base_results_dir> or set {RESULTS_ENV})"
    rows = [("pipeline", "stages", "state", "created")]
    for record, states in zip(records, poll(records)):
        rows.append(
            (record["id"], ",".join(record.get("stages", [])), summary(record, states), record.get("created", "-"))
        )
    return _table(rows)


def _pipeline_table(record: dict, states: Sequence[JobState]) -> str:
    slurm = on_slurm(record)
    # Only Slurm has job ids and restarts (a requeue keeps the id): jobs run here show neither column.
    header = (
        ("stage", "job", "id", "state", "elapsed/exit", "restarts", "log")
        if slurm
        else ("stage", "job", "state", "elapsed/exit", "log")
    )
    # Jobs the performance model scored show its step time beside the one they measured.
    predicted = any(job.get("prediction") for job in record["jobs"])
    header = header[:-1] + (("step predicted/measured",) if predicted else ()) + header[-1:]
    rows = [header]
    for job, state in zip(record["jobs"], states):
        logs = log_files(job)
        newest_log = str(logs[-1]) if logs else "-"
        step = (step_time_words(job),) if predicted else ()
        if slurm:
            job_id = job.get("job_id") or "-"
            rows.append(
                (job["stage"], job["job_name"], job_id, state.state, state.detail, state.restarts, *step, newest_log)
            )
        else:
            rows.append((job["stage"], job["job_name"], state.state, state.detail, *step, newest_log))
    title = (
        f"Pipeline {record['id']} ({record.get('cluster_type')}, created {record.get('created')} by "
        f"{record.get('user')}@{record.get('host')}): {summary(record, states)}"
    )
    return title + "\n" + _table(rows)


def _table(rows) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


# ---- logs ----------------------------------------------------------------------------------------------------


def logs(results: Path, run: str, stage: str | None = None, follow: bool = False) -> int:
    record = find_pipeline(results, run)
    index = _job_for_logs(record, stage)
    job = record["jobs"][index]
    files = log_files(job)
    if not follow:
        if not files:
            raise LauncherError(
                f"{job['job_name']} ({job['stage']}) has no log yet: it appears when the job starts, "
                f"as {job.get('log_glob')}; "
                f"add -f to wait for it"
            )
        _announce(files[-1])
        _copy(files[-1], 0)
        return 0
    try:
        return _follow(results, record, index)
    except KeyboardInterrupt:  # Ctrl-C is how a user stops following; the job itself goes on
        return 0


def _job_for_logs(record: dict, stage: str | None) -> int:
    """The job whose log to show: of STAGE (or the job so named), else of the whole pipeline, the one whose
    newest log was written last; the first candidate when none has a log yet."""
    jobs = record["jobs"]
    candidates = list(range(len(jobs)))
    if stage is not None:
        candidates = [
            i for i in candidates if stage in (jobs[i]["stage"], jobs[i].get("run_name"), jobs[i].get("job_name"))
        ]
        if not candidates:
            stages = ", ".join(dict.fromkeys(job["stage"] for job in jobs))
            raise ConfigError(
                f"STAGE={stage!r}: pipeline {record['id']} has no such stage or job; its stages: {stages}"
            )

    def last_written(index: int) -> float:
        mtimes = []
        for path in log_files(jobs[index]):
            try:
                mtimes.append(path.stat().st_mtime)
            except OSError:
                continue
        return max(mtimes, default=float("-inf"))

    return max(candidates, key=lambda index: (last_written(index), -index))


def _announce(path: Path) -> None:
    # On stderr, so that `logs RUN > file` holds only the log itself.
    print(f"==> {path}", file=sys.stderr, flush=True)


def _copy(path: Path, offset: int) -> int:
    """Writes the file from `offset` to stdout as bytes (logs need not be valid UTF-8); returns the new offset."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        while True:
            chunk = handle.read(1 << 16)
            if not chunk:
                break
            sys.stdout.buffer.write(chunk)
            offset += len(chunk)
    sys.stdout.buffer.flush()
    return offset


def _follow(results: Path, record: dict, index: int) -> int:
    """Like `tail -f`, moving on to a newer attempt's log when a requeue starts one, until the job has ended."""
    job = record["jobs"][index]
    files = log_files(job)
    path: Path | None = files[-1] if files else None
    offset = 0
    if path is None:
        print(f"waiting for {job['job_name']} to start and write its log ...", file=sys.stderr, flush=True)
    else:
        _announce(path)
    next_poll = 0.0
    while True:
        if path is not None:
            offset = _copy(path, offset)
        if time.monotonic() < next_poll:
            time.sleep(READ_SECONDS)
            continue
        next_poll = time.monotonic() + POLL_SECONDS
        live = _is_live(results, record, index)
        files = log_files(job)
        if files and files[-1] != path:
            if path is not None:
                _copy(path, offset)
            path, offset = files[-1], 0
            _announce(path)
            continue
        if not live:
            if path is None:
                raise LauncherError(f"{job['job_name']} ended without writing a log ({job.get('log_glob')})")
            _copy(path, offset)
            return 0


def _is_live(results: Path, record: dict, index: int) -> bool:
    current = record if on_slurm(record) else reload(results, record)  # the launcher updates a run-here record
    (states,) = poll([current], live_only=True)
    if not on_slurm(record):
        record["jobs"][index].update(current["jobs"][index])
    return states[index].live


# ---- cancel --------------------------------------------------------------------------------------------------


def cancel(results: Path, run: str) -> int:
    try:
        record = find_pipeline(results, run)
    except ConfigError as unknown:
        return _cancel_unrecorded(run, unknown)
    live = live_jobs([record])
    cancelled = {id(job) for job, _ in live}  # entries, by identity: run-here jobs have no job id
    unrecorded = []
    if on_slurm(record):
        ids = list(dict.fromkeys(str(job["job_id"]) for job, _ in live))
        # Slurm's own list by tag: jobs a damaged record no longer names, or a dead launcher never wrote down.
        unrecorded = [job for job in tagged_jobs() if job.pipeline_id == record["id"] and job.job_id not in ids]
        ids += [job.job_id for job in unrecorded]
        if ids:
            # One call for the whole pipeline; an array's id cancels all of its tasks.
            _scancel(ids)
    elif live:
        job = live[0][0]
        if launcher_alive(record, job) is None:
            raise LauncherError(f"pipeline {record['id']} runs on {record.get('host')}: cancel it there")
        _terminate(int(job["pid"]))
    rows = [("", "stage", "job", "id", "state")]
    for job, state in live:
        rows.append(("cancelled", job["stage"], job["job_name"], job.get("job_id") or "-", f"was {state}"))
    for job in unrecorded:
        rows.append(("cancelled", f"job {job.index}", job.name, job.job_id, f"was {job.state}, found by its tag"))
    for job in record["jobs"]:
        if id(job) not in cancelled:
            if on_slurm(record):
                what = "already ended" if job.get("job_id") else "never submitted"
            else:
                what = "already ended" if job.get("exit_code") is not None else "not running"
            rows.append((what, job["stage"], job["job_name"], job.get("job_id") or "-", ""))
    total = max(len(record["jobs"]), len(live) + len(unrecorded))
    print(f"Pipeline {record['id']}: cancelled {len(live) + len(unrecorded)} of {total} jobs")
    print(_table(rows))
    return 0


def _cancel_unrecorded(run: str, unknown: ConfigError) -> int:
    """`cancel RUN` where no ledger record matches (deleted, or damaged past reading): on a Slurm login node, the
    live jobs whose tag names a pipeline id starting with RUN, or whose job name is RUN."""
    if shutil.which("squeue") is None:
        raise unknown
    jobs = [job for job in tagged_jobs() if job.pipeline_id.startswith(run) or job.name == run]
    if not jobs:
        raise unknown
    pipelines = sorted({job.pipeline_id for job in jobs})
    if len(pipelines) > 1 and not any(job.name == run for job in jobs):
        listed = ", ".join(pipelines)
        raise ConfigError(f"RUN={run!r}: matches the queued jobs of {len(pipelines)} pipelines ({listed}); give more")
    _scancel([job.job_id for job in jobs])
    print(f"No ledger record matches {run!r}; cancelled {len(jobs)} job(s) found in squeue by their launcher tags")
    rows = [("", "pipeline", "job", "id", "state")]
    rows += [("cancelled", job.pipeline_id, job.name, job.job_id, f"was {job.state}") for job in jobs]
    print(_table(rows))
    return 0


def _scancel(ids: list[str]) -> None:
    result = run_command(["scancel", *ids])
    if result.returncode != 0:
        raise LauncherError(f"scancel {' '.join(ids)} failed: {(result.stderr or result.stdout).strip()}")


def _terminate(pid: int) -> None:
    """SIGTERM to the launcher and everything it started. A launcher started from a terminal leads its own
    process group; otherwise the group is the caller's (a script, a CI runner), so only its own descendants
    are signalled."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    if group == pid:
        os.killpg(group, signal.SIGTERM)
        return
    for target in [pid, *_descendants(pid)]:
        try:
            os.kill(target, signal.SIGTERM)
        except ProcessLookupError:
            continue


def _descendants(pid: int) -> list[int]:
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
