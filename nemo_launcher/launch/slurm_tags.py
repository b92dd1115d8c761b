"""Slurm's own list of the launcher's jobs, found by the tag each one carries, whatever the ledger says.

Every job the launcher queues carries `nemo-launcher:<pipeline id>:<job index>` as the last word of its
--comment (backends/slurm.py), and runs in its job directory (sbatch is started there, so squeue's %Z is that
directory). ONE `squeue --me` call therefore answers, with no ledger at all: which of this user's jobs the
launcher queued, for which pipeline, and for which run directory. The ledger can be damaged, deleted, or
never told (a launcher killed while sbatch was queueing); the scheduler's list cannot.

    jobs = tagged_jobs()                       # live ones (pending, running, ...)
    jobs = tagged_jobs(include_ended=True)     # and the ended ones the controller still remembers
"""

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import LauncherError

TAG_PREFIX = "nemo-launcher"
_TAG = re.compile(re.escape(TAG_PREFIX) + r":(?P<pipeline>[^:\s]+):(?P<index>\d+)")
# The comment goes last: it is the one field a user may fill with anything, `|` included.
_FORMAT = "%F|%T|%Z|%j|%k"


@dataclass(frozen=True)
class TaggedJob:
    job_id: str  # an array's own id (what scancel takes for all its tasks)
    state: str  # Slurm's state word: PENDING, RUNNING, ...
    pipeline_id: str
    index: int  # the job's position in its pipeline
    directory: str  # where sbatch ran: the job directory
    name: str

    @property
    def tag(self) -> str:
        return submission_tag(self.pipeline_id, self.index)


def submission_tag(pipeline_id: str, index: int) -> str:
    """Unique to one job of one launcher command; the Slurm backend attaches it to the job to find it again."""
    return f"{TAG_PREFIX}:{pipeline_id}:{index}"


def parse_tag(comment: str) -> tuple[str, int] | None:
    """(pipeline id, job index) from a job's comment, whose last word is the tag; None for other jobs."""
    words = comment.split()
    match = _TAG.fullmatch(words[-1]) if words else None
    return (match["pipeline"], int(match["index"])) if match else None


def parse_squeue(output: str) -> list[TaggedJob]:
    """The launcher's jobs in `squeue -o '%F|%T|%Z|%j|%k'` output, one per job (an array's tasks are one job)."""
    from .job_states import LIVE_STATES  # here, not at the top: job_states reads the ledger, which reads tags

    jobs: dict[str, TaggedJob] = {}
    for line in output.splitlines():
        fields = line.strip().split("|", 4)
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        job_id, state, directory, name, comment = fields
        tag = parse_tag(comment)
        if tag is None:
            continue
        known = jobs.get(job_id)
        # An array lists a line per running task and one for the pending rest: any live line makes it live.
        if known is None or (known.state not in LIVE_STATES and state in LIVE_STATES):
            jobs[job_id] = TaggedJob(job_id, state, tag[0], tag[1], directory, name)
    return list(jobs.values())


def tagged_jobs(include_ended: bool = False) -> list[TaggedJob]:
    """This user's jobs that carry a launcher tag, with ONE squeue call. Raises LauncherError when squeue is
    missing or fails: a caller that cannot see the queue must not act as if it were empty."""
    from .job_states import LIVE_STATES, run_command

    argv = ["squeue", "--me", "--noheader", f"--format={_FORMAT}"] + (["--states=all"] if include_ended else [])
    result = run_command(argv)
    if result.returncode != 0:
        raise LauncherError(f"squeue failed: {(result.stderr or result.stdout).strip() or result.returncode}")
    jobs = parse_squeue(result.stdout)
    return jobs if include_ended else [job for job in jobs if job.state in LIVE_STATES]


def in_directories(jobs: Iterable[TaggedJob], directories: Iterable) -> list[TaggedJob]:
    """The jobs whose working directory is one of `directories`; squeue prints the directory sbatch ran in as
    the kernel resolved it, so both sides are compared with their links resolved."""
    wanted = {os.path.realpath(directory) for directory in directories}
    return [job for job in jobs if os.path.realpath(job.directory) in wanted]
