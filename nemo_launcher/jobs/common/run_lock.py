"""One writer per run directory: a lock file that names its holder, and the rules for a lock left behind.

    lock = RunDirectoryLock(Path(cfg.exp_manager.explicit_log_dir))
    taken_over = lock.acquire()       # raises RunDirectoryInUse naming the other job; says why a stale lock was taken
    train_and_save(cfg)               # write into the directory
    lock.release()                    # removes the file only while it is still ours

Two submissions with the same run name (two users, or one user twice) would otherwise train into one checkpoint
folder at the same time. The file `<dir>/.nemo_launcher.lock` holds JSON: user, host, pid (and the pid's start
time, so a reused pid is not mistaken for the holder), Slurm job id and array task, and when it was taken. It is
created whole or not at all (written under a private name, then hard-linked into place, which fails if a lock
exists), so a reader never sees half of one.

A lock is stale, and taken over, when
- its holder ran on this host and that process is gone;
- it belongs to the same Slurm job (a requeued attempt takes over from the attempt before it);
- it belongs to another Slurm job that `squeue` no longer lists (when squeue is there and answers).
Otherwise the holder is alive, or cannot be shown dead (another host, no Slurm job), and the directory is in use.

Standard library only: it runs before torch is imported.
"""

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional

from ...contract import RUN_DIRECTORY_IN_USE_EXIT_CODE, RUN_LOCK_FILE
from ...contract.processes import process_alive, process_start_time
from .report import JobFault

# How many times acquire() re-reads a lock that changed under it (another job took it over at the same moment)
# before it gives up and reports whoever holds it then.
_ATTEMPTS = 5
# A lock file that cannot be parsed is one whose writer died between creating and filling it (only possible where
# the file system refuses hard links); younger than this, it is treated as being written right now.
_UNREADABLE_GRACE_S = 60.0


class RunDirectoryInUse(JobFault):
    """Another live job holds the run directory; the message says whose, and what to do."""

    exit_code = RUN_DIRECTORY_IN_USE_EXIT_CODE

    def __init__(self, directory: Path, holder: Optional["Holder"]):
        self.directory = directory
        self.holder = holder
        who = holder.describe() if holder else "another job (its lock file keeps changing or cannot be read)"
        super().__init__(
            f"{directory} is in use by {who}; wait for it, cancel it, or use another run name "
            f"(if that job is gone, delete {directory / RUN_LOCK_FILE})"
        )


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or wants) a run directory."""

    user: str
    host: str  # socket.gethostname() of the process
    pid: int
    pid_started: str | None  # field 22 of /proc/<pid>/stat (clock ticks after boot); None where there is no /proc
    job_id: str | None  # SLURM_JOB_ID: unique per array task too, and kept by a requeued attempt
    job_label: str | None  # what people call the job: "1234", or "1230_4" for task 4 of array job 1230
    process_group: str | None  # TORCHELASTIC_RUN_ID: shared by the workers of one torchrun outside Slurm
    since: float  # time.time() when the lock was taken
    token: str  # random: tells our own lock from a lock that replaced it

    def describe(self) -> str:
        job = f"job {self.job_label}" if self.job_label else "job"
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.since))
        return f"{self.user}'s {job} on {self.host} (pid {self.pid}, since {when})"

    def same_job(self, other: "Holder") -> bool:
        """Processes of one job: one Slurm job (any attempt), or one torchrun outside Slurm."""
        if self.job_id or other.job_id:
            return self.job_id == other.job_id
        return bool(self.process_group) and self.process_group == other.process_group

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Holder":
        data = json.loads(text)
        fields = {field.name for field in dataclasses.fields(cls)}
        missing = fields - set(data)
        if missing:
            raise ValueError(f"lock file lacks {', '.join(sorted(missing))}")
        return cls(**{key: data[key] for key in fields})


def this_process(env: Mapping[str, str] | None = None) -> Holder:
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or None
    label = job_id
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        label = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return Holder(
        user=_user(),
        host=socket.gethostname(),
        pid=os.getpid(),
        pid_started=process_start_time(os.getpid()),
        job_id=job_id,
        job_label=label,
        process_group=env.get("TORCHELASTIC_RUN_ID") or None,
        since=time.time(),
        token=uuid.uuid4().hex,
    )


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER") or f"uid {os.getuid()}"


def squeue_lists(job_id: str) -> bool | None:
    """Whether Slurm still lists job `job_id` (pending, running, completing, ...); None when that cannot be told
    (no squeue here, or the controller does not answer)."""
    if shutil.which("squeue") is None:
        return None
    try:
        result = subprocess.run(
            ["squeue", "--noheader", "--jobs", job_id, "--format=%T"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode == 0:
        return bool(result.stdout.strip())
    # Jobs that ended long ago are forgotten by the controller, which then calls their id invalid.
    if "Invalid job id" in result.stderr:
        return False
    return None


def stale_reason(holder: Holder, me: Holder, job_is_live: Callable[[str], bool | None] = squeue_lists) -> str | None:
    """Why `holder`'s lock may be taken over by `me`, or None while the holder may still be writing."""
    if holder.job_id and holder.job_id == me.job_id:
        return f"an earlier attempt of this Slurm job ({holder.describe()})"
    if holder.host == me.host:
        if not process_alive(holder.pid, holder.pid_started):
            return f"{holder.describe()} has ended"
        return None
    if holder.job_id and job_is_live(holder.job_id) is False:
        return f"{holder.describe()} has ended (squeue no longer lists it)"
    return None


class RunDirectoryLock:
    def __init__(
        self, directory: Path, me: Holder | None = None, job_is_live: Callable[[str], bool | None] = squeue_lists
    ):
        self.directory = Path(directory)
        self.path = self.directory / RUN_LOCK_FILE
        self.me = me or this_process()
        self.job_is_live = job_is_live
        self.held = False

    def acquire(self) -> str | None:
        """Takes the lock, or raises RunDirectoryInUse. Returns why the stale lock it took over was stale (naming
        its holder), else None. Creates the directory if needed (an OSError from that is the caller's)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        content = self.me.to_json().encode()
        taken_over = None
        holder = None
        for _ in range(_ATTEMPTS):
            if self._create(content):
                self.held = True
                return taken_over
            raw, holder = self._read()
            if raw is None:
                continue  # released between our attempt and the read: try again
            if holder is None:  # unreadable
                age = self._age()
                if age is not None and age < _UNREADABLE_GRACE_S:
                    time.sleep(0.2)
                    continue
                reason = "an unreadable lock file left by a job that died while taking it"
            else:
                reason = stale_reason(holder, self.me, self.job_is_live)
                if reason is None:
                    raise RunDirectoryInUse(self.directory, holder)
            if self._remove_if_unchanged(raw):
                taken_over = reason
        raise RunDirectoryInUse(self.directory, holder)

    def release(self) -> None:
        """Removes the lock file if it is still ours (a job that took over a lock it thought stale keeps its own)."""
        if not self.held:
            return
        self.held = False
        _, holder = self._read()
        if holder is not None and holder.token == self.me.token:
            self.path.unlink(missing_ok=True)

    def held_by_another_live_job(self) -> bool:
        """For ranks other than 0, which never take the lock: whether a job other than ours holds it and is not
        shown dead by the checks that need no squeue (a thousand ranks must not query the controller at once)."""
        _, holder = self._read()
        if holder is None or holder.same_job(self.me):
            return False
        return stale_reason(holder, self.me, job_is_live=lambda job_id: None) is None

    def wait_for_own_job(self, timeout_s: float, poll_s: float = 0.1) -> bool | None:
        """For ranks other than 0: waits until the lock names this job (rank 0 has taken it); False after
        `timeout_s`; None at once when this process cannot tell its job's lock from another's (neither Slurm nor
        torchrun started it). Sleeps in Python, so a SIGTERM handler runs at once; inside the process group's
        rendezvous it would wait for a C++ call to return, and Slurm's SIGKILL would come first."""
        if not (self.me.job_id or self.me.process_group):
            return None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _, holder = self._read()
            if holder is not None and holder.same_job(self.me):
                return True
            time.sleep(poll_s)
        return False

    # ---- file operations ----------------------------------------------------------------------------
    def _create(self, content: bytes) -> bool:
        """Puts our lock in place whole; False when a lock exists."""
        private = self.directory / f"{RUN_LOCK_FILE}.{self.me.token}"
        with open(private, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(private, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            return self._create_exclusive(content)  # a file system without hard links
        finally:
            private.unlink(missing_ok=True)

    def _create_exclusive(self, content: bytes) -> bool:
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        return True

    def _read(self):
        """(raw bytes or None when there is no lock, Holder or None when unreadable)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None, None
        try:
            return raw, Holder.from_json(raw.decode())
        except (ValueError, TypeError, UnicodeDecodeError):
            return raw, None

    def _age(self) -> float | None:
        try:
            return time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None

    def _remove_if_unchanged(self, judged: bytes) -> bool:
        """Removes the stale lock we judged, and nothing else: it is first renamed aside (atomic; only one of two
        jobs taking over at once gets it), then compared with what we judged; a fresh lock that replaced it in the
        meantime is put back."""
        aside = self.directory / f"{RUN_LOCK_FILE}.stale.{self.me.token}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        try:
            if aside.read_bytes() == judged:
                return True
            # Not ours to remove: put it back, unless yet another lock has been taken there since.
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            return False
        finally:
            aside.unlink(missing_ok=True)
