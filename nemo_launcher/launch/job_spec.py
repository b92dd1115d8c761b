"""What a stage asks for: plain frozen data, no backend knowledge and no shell text."""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

# How a job waits for the job before it (Slurm dependency types the launcher chains with).
CHAIN_TYPES = ("afterok", "afterany", "afternotok", "aftercorr")


@dataclass(frozen=True)
class Command:
    """One run of a job program: `python3 -u -m <module> <args...>`.

    distributed: run on every task of the job (srun over all tasks, torchrun locally, bcprun on all
    replicas); otherwise run once, on one task.
    """

    module: str
    args: Tuple[str, ...] = ()
    distributed: bool = True


@dataclass(frozen=True)
class JobSpec:
    stage: str  # the stage kind that made this job, e.g. "training"
    name: str  # job name without any cluster prefix, e.g. "gpt3_5b"
    directory: Path  # job directory: resolved config, script and logs live here
    commands: Tuple[Command, ...]
    time_limit: str  # Slurm time format, e.g. "6-00:00:00"
    nodes: int = 1
    tasks_per_node: int = 1
    uses_gpus: bool = True  # False: CPU-only job, no GPUs are requested
    gpus_per_node: Optional[int] = None  # GPUs asked for on each node when uses_gpus; None: the cluster's gpus_per_node
    cpus_per_task: Optional[int] = None
    array: Optional[str] = None  # Slurm array spec such as "0-29%30"; None for a single job
    # Where there are no job arrays (BCP), the array's items are dealt over this many nodes x processes instead.
    array_nodes: int = 1
    array_tasks_per_node: int = 1
    chain: str = "afterok"  # dependency type on the job before it in the pipeline
    dependency: Tuple[str, ...] = ()  # fixed dependency items, e.g. ("singleton",) or ("afterok:123",)
    env: Tuple[Tuple[str, str], ...] = ()  # exported in the job, in this order
    checkpoint_signal: bool = False  # ask the scheduler for SIGUSR1 before the time limit
    # A file the job leaves behind when it stopped early and wants another attempt (Slurm requeues the job).
    requeue_marker: Optional[Path] = None
    files: Tuple[Tuple[Path, str], ...] = field(default=(), repr=False)  # written into place before submitting
    # Inputs as (config key, path or glob pattern), checked at launch unless an earlier job of the pipeline writes
    # them; and the paths (files or directories) this job writes, which later jobs may read.
    reads: Tuple[Tuple[str, str], ...] = ()
    writes: Tuple[str, ...] = ()

    def __post_init__(self):
        assert self.chain in CHAIN_TYPES, self.chain
        assert self.nodes >= 1 and self.tasks_per_node >= 1, (self.nodes, self.tasks_per_node)
        assert self.commands, f"job {self.name} has no command"
