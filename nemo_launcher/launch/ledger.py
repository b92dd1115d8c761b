"""The pipeline ledger: one JSON record per submitting launcher command, under `<base_results_dir>/.ledger/`.

    ledger = open_ledger(plan, argv)        # before the first submission; real runs only
    ledger.submitted(index, job_id, dependency)    # queued backends (Slurm)
    ledger.started(index, dependency); ledger.finished(index, exit_code)   # backends that run jobs here
    ledger.close("submitted")               # or rolled_back, finished, failed, interrupted

    record = find_pipeline(base_results_dir, "gpt3_5b")   # what `status`, `logs` and `cancel` read

A record names every job of the pipeline in submission order: its id, script, config hashes and where its
logs go. It is the only place that ties a pipeline's jobs together after the launcher has exited. Standard
library only; the scheduler is asked (lazily, in `job_states`) only by `live_jobs`.
"""

import glob
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..contract.processes import process_start_time
from .errors import ConfigError
from .ledger_damage import STATES, Damage, read_record
from .orphans import adopt_abandoned
from .slurm_tags import submission_tag
from .writes import make_directories, write_atomically

LEDGER_DIR = ".ledger"
_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_PLACEHOLDER = re.compile(r"<[^>]*>")


def ledger_dir(base_results_dir) -> Path:
    return Path(base_results_dir) / LEDGER_DIR


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _log_glob(backend, spec, job_id: str | None) -> str:
    """The backend's own log pattern with each `<placeholder>` made a `*`, the literal part escaped, so the
    ledger never re-states a backend's log naming."""
    base = str(backend.log_base(spec))
    pattern = backend.log_pattern(spec, job_id)
    if not pattern.startswith(base):  # a backend that logs elsewhere: keep what can be kept
        return _PLACEHOLDER.sub("*", pattern)
    tail = pattern[len(base) :]
    return glob.escape(base) + "*".join(glob.escape(part) for part in _PLACEHOLDER.split(tail))


def _git_commit(repository: Path) -> str | None:
    """HEAD's commit read from the .git files (HEAD -> ref -> loose ref or packed-refs); None when not a checkout."""
    try:
        git = repository / ".git"
        if git.is_file():  # a worktree or submodule: ".git" names the real git directory
            text = git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git = (repository / text[len("gitdir:") :].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if re.fullmatch(r"[0-9a-f]{40,64}", head) else None
        ref = head[len("ref:") :].strip()
        common = git
        if (git / "commondir").is_file():  # worktrees keep their refs in the main repository's git directory
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for root in (git, common):
            if (root / ref).is_file():
                return (root / ref).read_text().strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                words = line.split()
                if len(words) == 2 and words[1] == ref:
                    return words[0]
    except OSError:  # unreadable git metadata: the run records no commit rather than failing
        return None
    return None


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return str(os.getuid())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def save_record(path: Path, record: dict) -> None:
    # Readers (`status` in another shell) must never see half a record; a failed write leaves the last whole one.
    write_atomically(path, (json.dumps(record, indent=1) + "\n").encode("utf-8"), 0o644)


class Ledger:
    """One pipeline's record on disk, rewritten whole after every change."""

    def __init__(self, path: Path, record: dict, log_glob_of: Callable[[int, str], str] | None = None):
        self.path = path
        self.record = record
        # (job index, job id) -> that job's log glob: a queued job's log names carry the id it is given.
        self._log_glob_of = log_glob_of

    @property
    def id(self) -> str:
        return self.record["id"]

    def submitted(self, index: int, job_id: str | None, dependency: Sequence[str], save: bool = True) -> None:
        """Job `index` is queued as `job_id` (Slurm). A rollback that finds a job only now records it without
        saving, and then saves once as it closes the record."""
        job = self.record["jobs"][index]
        job.update(job_id=job_id, dependency=list(dependency))
        if self._log_glob_of is not None and job_id:
            job["log_glob"] = self._log_glob_of(index, job_id)
        if save:
            self._save()

    def started(self, index: int, dependency: Sequence[str]) -> None:
        """Job `index` starts running here (interactive, bcp)."""
        self.record["jobs"][index].update(dependency=list(dependency), started=_now(), pid=os.getpid())
        self._save()

    def finished(self, index: int, exit_code: int) -> None:
        """Job `index`, run here, ended with `exit_code`."""
        self.record["jobs"][index].update(exit_code=exit_code, ended=_now())
        self._save()

    def close(self, state: str) -> None:
        assert state in STATES, state
        self.record["state"] = state
        self._save()

    def discard(self) -> bool:
        """Removes the record (a rollback that cannot close it must not leave it saying `submitting`); returns
        whether it is gone."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            return False
        return True

    def _save(self) -> None:
        save_record(self.path, self.record)


def open_ledger(plan, argv: Sequence[str]) -> Ledger:
    """Writes the record of `plan` (every job, none submitted yet) and returns it for the pipeline to update."""
    import socket

    context, backend = plan.context, plan.backend
    jobs = [job for stage_jobs in plan.jobs_by_stage for job in stage_jobs]
    moment = datetime.now(UTC)
    first = _UNSAFE_IN_FILE_NAME.sub("_", jobs[0].spec.name).strip("._") or "pipeline"
    pipeline_id = f"{moment:%Y%m%d-%H%M%S}-{first}-{os.urandom(2).hex()}"
    runs_here = not backend.queues_jobs
    entries = []
    for job in jobs:
        spec = job.spec
        entry = {
            "stage": spec.stage,
            "job_name": backend.job_name(spec),
            "run_name": spec.name,
            "directory": str(spec.directory),
            "script": str(job.script_path),
            "script_sha256": _sha256(job.script),
            "configs": [{"path": str(path), "sha256": _sha256(text)} for path, text in spec.files],
            "job_id": None,
            "dependency": [],
            "array": backend.array_words(spec),  # as the backend says it: Slurm "0-29%30", others "0-29"
            "log_glob": _log_glob(backend, spec, None),
        }
        if spec.prediction is not None:
            # status sets what the job measures (measured_steps_dir) beside what the plan predicted.
            entry.update(prediction=dict(spec.prediction), measured_steps_dir=str(spec.measured_steps_dir))
        if backend.queues_jobs:
            # Known before its sbatch runs: a launcher killed while sbatch queues the job leaves the tag to look up.
            entry["tag"] = submission_tag(pipeline_id, len(entries))
        if runs_here:
            entry.update(exit_code=None, started=None, ended=None, pid=os.getpid())
        entries.append(entry)
    record = {
        "id": pipeline_id,
        "created": moment.isoformat(timespec="milliseconds"),  # orders pipelines submitted within one second
        "argv": list(argv),
        "cwd": os.getcwd(),
        "user": _user(),
        "host": socket.gethostname(),
        # Whether this launcher is still at work on a record left `submitting` (orphans.py): pid reuse is told
        # apart by the process's start time.
        "launcher_pid": os.getpid(),
        "launcher_started": process_start_time(os.getpid()),
        "cluster_type": context.cluster_type,
        "launcher_commit": _git_commit(Path(context.launcher_scripts_path)),
        "stages": list(dict.fromkeys(job.spec.stage for job in jobs)),
        "state": "running" if runs_here else "submitting",
        "jobs": entries,
    }
    directory = ledger_dir(context.base_results_dir)
    make_directories(directory)
    ledger = Ledger(
        directory / f"{pipeline_id}.json", record, lambda index, job_id: _log_glob(backend, jobs[index].spec, job_id)
    )
    ledger._save()
    return ledger


# ---- readers -------------------------------------------------------------------------------------------------


def read_ledger(base_results_dir) -> tuple[list[dict], list[Damage]]:
    """Every record under `base_results_dir`, newest first, with what can still be read of damaged ones; and the
    damage of each damaged one (ledger_damage.py), for the caller to report."""
    directory = ledger_dir(base_results_dir)
    if not directory.is_dir():
        return [], []
    records, damages, whole = [], [], []
    for path in sorted(directory.glob("*.json")):
        record, damage = read_record(path)
        if damage is not None:
            damages.append(damage)
            record = damage.record
        elif record is not None:
            whole.append(record)
        if record is not None:
            records.append(record)
    adopt_abandoned(base_results_dir, whole)  # before anyone decides on them (orphans.py); damaged ones stay as read
    # Ids start with the UTC time, to the second; `created` breaks no ties the id does not.
    records.sort(key=lambda record: (record.get("created", ""), record["id"]), reverse=True)
    return records, damages


def load_pipelines(base_results_dir) -> list[dict]:
    """Every record under `base_results_dir`, newest first. A damaged record gets one warning on stderr naming
    it, what is wrong and the fix; its readable jobs stay listed, so one damaged file never hides the others."""
    records, damages = read_ledger(base_results_dir)
    for damage in damages:
        print(damage.warning(), file=sys.stderr)
    return records


def reload(base_results_dir, record: dict) -> dict:
    """The current content of a record (the launcher that owns it may have updated it since); the last content
    read while the file is damaged."""
    record_now, _ = read_record(ledger_dir(base_results_dir) / f"{record['id']}.json")
    return record_now if record_now is not None else record


def find_pipeline(base_results_dir, run: str) -> dict:
    """The pipeline `run` names: its id, a unique prefix of an id, or any job's run name or job name (then the
    newest such pipeline). Raises ConfigError naming what was looked up, where, and the recorded run names."""
    records = load_pipelines(base_results_dir)
    for record in records:
        if record["id"] == run:
            return record
    prefixed = [record for record in records if record["id"].startswith(run)]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        ids = ", ".join(record["id"] for record in prefixed[:5])
        raise ConfigError(f"RUN={run!r}: the prefix matches {len(prefixed)} pipelines ({ids}); give more of the id")
    for record in records:  # newest first: the newest pipeline of that run wins
        if any(run in (job.get("run_name"), job.get("job_name")) for job in record["jobs"]):
            return record
    where = ledger_dir(base_results_dir)
    if not records:
        raise ConfigError(
            f"RUN={run!r}: no pipeline is recorded in {where}; pass --results <base_results_dir> "
            f"(or set NEMO_LAUNCHER_RESULTS) if the run used another base_results_dir"
        )
    names = ", ".join(dict.fromkeys(job.get("run_name", "?") for record in records for job in record["jobs"]))
    raise ConfigError(
        f"RUN={run!r}: no pipeline id, run name or job name matches in {where}; recorded run names: {names}"
    )


def log_files(job: dict) -> list[Path]:
    """The job's existing log files, oldest first: by attempt number, then by modification time. For a job run
    here the names carry no id, so files written outside its recorded run (other runs of the same job
    directory) are left out."""
    pattern = job.get("log_glob")
    if not pattern:
        return []
    window = _run_window(job)
    paths = []
    for name in glob.glob(pattern):
        try:
            mtime = os.path.getmtime(name)
        except OSError:  # removed while we looked
            continue
        if window is None or window[0] <= mtime <= window[1]:
            paths.append((_attempt(name), mtime, Path(name)))
    return [path for _, _, path in sorted(paths)]


def _run_window(job: dict) -> tuple[float, float] | None:
    if job.get("job_id") or not job.get("started"):
        return None
    slack = 2.0  # file times and the recorded times come from different clocks' roundings
    try:
        start = datetime.fromisoformat(job["started"]).timestamp() - slack
        end = datetime.fromisoformat(job["ended"]).timestamp() + slack if job.get("ended") else float("inf")
    except ValueError:
        return None
    return start, end


def _attempt(name: str) -> int:
    match = re.search(r"_attempt(\d+)\.[^./]*$", name)
    return int(match.group(1)) if match else 0


def live_jobs(records: Sequence[dict]) -> list[tuple[dict, str]]:
    """(job entry, state) for every job of `records` still queued or running: Slurm jobs that one `squeue` call
    still lists, and jobs run here whose launcher is alive and that have no exit code yet."""
    from .job_states import poll

    live = []
    for record, states in zip(records, poll(records, live_only=True)):
        live += [(job, state.state) for job, state in zip(record["jobs"], states) if state.live]
    return live


def elapsed_since(started: str | None, ended: str | None = None) -> str:
    """`H:MM:SS` between two ISO times (or until now), as Slurm prints elapsed times."""
    if not started:
        return "-"
    try:
        start = datetime.fromisoformat(started).timestamp()
        stop = datetime.fromisoformat(ended).timestamp() if ended else time.time()
    except ValueError:
        return "-"
    seconds = max(0, int(stop - start))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
