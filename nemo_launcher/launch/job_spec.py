"""What a stage asks for: plain frozen data, no backend knowledge and no shell text.

A time limit is a duration, an array is its item indices plus how many may run at once, and a dependency is a
kind from `Dependency` with the jobs it waits for bound as data (the pipeline binds the job before it). Each
backend translates these into its own terms (backends/slurm.py: `--time`, `--array=0-29%30`, `afterok:<id>`), or
refuses at validate() what it cannot honour.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..contract.job_start_values import AtJobStart


class Dependency(enum.Enum):
    """How a job waits for other jobs."""

    AFTER_SUCCESS = "after_success"  # starts once the jobs it waits for ended successfully
    AFTER_ANY_END = "after_any_end"  # starts once they ended, however they ended
    AFTER_FAILURE = "after_failure"  # starts only if they failed
    # An array job after an array job: item i starts once item i of the job before ended successfully.
    AFTER_CORRESPONDING_ITEM = "after_corresponding_item"
    AFTER_START = "after_start"  # starts once they have started (outside jobs only)
    SINGLETON = "singleton"  # never runs beside another job of the same name and user; waits for no job


@dataclass(frozen=True)
class Wait:
    """One dependency: its kind and the ids of the jobs it waits for (none for SINGLETON)."""

    kind: Dependency
    job_ids: tuple[str, ...] = ()

    def __post_init__(self):
        assert (self.kind is Dependency.SINGLETON) == (not self.job_ids), self


@dataclass(frozen=True)
class Command:
    """One run of a job program: `python3 -u -m <module> <args...>`.

    distributed: run on every task of the job (srun over all tasks, torchrun locally, bcprun on all
    replicas); otherwise run once, on one task.
    """

    module: str
    args: tuple[str, ...] = ()
    distributed: bool = True


@dataclass(frozen=True)
class JobGroup:
    """One component of a heterogeneous job (JobSpec.groups): its own nodes and processes running one program, started
    beside the other groups. The PPO roles are groups: servers that find each other by the first host of each group,
    which the job exports in `host_variable` to every group (Slurm: `hetjob` components; here: local processes)."""

    name: str  # what the plan, the logs and the monitor call it, e.g. "critic"
    command: Command
    nodes: int = 1
    tasks_per_node: int = 1
    host_variable: str | None = None  # exported to every group: the first host of this group

    def __post_init__(self):
        assert self.nodes >= 1 and self.tasks_per_node >= 1, self
        assert self.name.isidentifier(), self.name  # part of log file names and shell variable values


@dataclass(frozen=True)
class JobSpec:
    stage: str  # the stage kind that made this job, e.g. "training"
    name: str  # job name without any cluster prefix, e.g. "gpt3_5b"
    directory: Path  # job directory: resolved config, script and logs live here
    commands: tuple[Command, ...]
    time_limit: timedelta  # wall-clock limit of the job
    nodes: int | AtJobStart = 1  # AtJobStart: the number the job's environment holds when it starts (BCP)
    tasks_per_node: int = 1
    uses_gpus: bool = True  # False: CPU-only job, no GPUs are requested
    gpus_per_node: int | None = None  # GPUs asked for on each node when uses_gpus; None: the cluster's gpus_per_node
    cpus_per_task: int | None = None
    # An array job: one task per item index (e.g. file numbers 0..29); None for a single job.
    array_items: tuple[int, ...] | None = None
    array_limit: int | None = None  # at most this many items run at once; None: no limit
    # Where there are no job arrays (BCP), the array's items are dealt over this many nodes x processes instead.
    array_nodes: int = 1
    array_tasks_per_node: int = 1
    after_previous: Dependency = Dependency.AFTER_SUCCESS  # how it waits for the job before it in the pipeline
    waits: tuple[Wait, ...] = ()  # fixed dependencies: SINGLETON, or outside jobs named in run.dependency
    env: tuple[tuple[str, str], ...] = ()  # exported in the job, in this order
    checkpoint_signal: bool = False  # ask the scheduler for SIGUSR1 before the time limit
    # A file the job leaves behind when it stopped early and wants another attempt (Slurm requeues the job).
    requeue_marker: Path | None = None
    files: tuple[tuple[Path, str], ...] = field(default=(), repr=False)  # written into place before submitting
    # Inputs as (config key, path or glob pattern), checked at launch unless an earlier job of the pipeline writes
    # them; and the paths (files or directories) this job writes, which later jobs may read.
    reads: tuple[tuple[str, str], ...] = ()
    writes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the plan tells the user about this job beyond its table row
    # The performance model's figures for a training-like job (launch/predictions.py; Estimate.as_json()), and
    # the folder where the job writes what it measured of its steps (contract/measured_steps.py).
    prediction: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    measured_steps_dir: Path | None = None
    # A heterogeneous job: groups started together, each on its own nodes (then `nodes` is their sum, `tasks_per_node`
    # the largest group's and `commands` their commands, in order). The first group to end ends the job with its exit
    # status: the others get `stop_grace` to end by themselves, then they are stopped.
    groups: tuple[JobGroup, ...] = ()
    stop_grace: timedelta = timedelta(seconds=60)
    # The group that drives the others (PPO's actor): one that ends with status 0 before it (a server it shut down)
    # leaves it `stop_grace` to end, and the job takes its status; None: every group counts alike.
    driver_group: str | None = None

    def __post_init__(self):
        assert self.after_previous not in (Dependency.SINGLETON, Dependency.AFTER_START), self.after_previous
        assert isinstance(self.time_limit, timedelta) and self.time_limit.total_seconds() > 0, self.time_limit
        assert self.array_items is None or self.array_items, f"job {self.name} has an empty array"
        assert self.array_limit is None or (self.array_items and self.array_limit >= 1), self.array_limit
        assert isinstance(self.nodes, AtJobStart) or self.nodes >= 1, self.nodes
        assert self.tasks_per_node >= 1, self.tasks_per_node
        assert self.commands, f"job {self.name} has no command"
        if self.groups:
            assert self.commands == tuple(group.command for group in self.groups), self.name
            assert self.nodes == sum(group.nodes for group in self.groups), self.name
            assert self.array_items is None, "a heterogeneous job is not an array"
            assert len({group.name for group in self.groups}) == len(self.groups), self.groups
            assert self.driver_group is None or self.driver_group in {group.name for group in self.groups}

    @classmethod
    def heterogeneous(cls, groups: tuple[JobGroup, ...], **fields) -> "JobSpec":
        """A job of `groups` (nodes, tasks per node and commands derived from them)."""
        return cls(
            commands=tuple(group.command for group in groups),
            nodes=sum(group.nodes for group in groups),
            tasks_per_node=max(group.tasks_per_node for group in groups),
            groups=groups,
            **fields,
        )

    @property
    def is_array(self) -> bool:
        return self.array_items is not None
