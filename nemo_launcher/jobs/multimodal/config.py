"""The resolved multimodal config, bound as the launcher bound it, and which share of the work this process does.

cfg = load_config("reorganize_tar", argv)         # MultimodalDataConfig
tasks, count = array_tasks(cfg, "reorganize_tar")  # e.g. ([1], 2) on array task 1 of 2; every task when run here
mine = share(items, task, count)                   # task's contiguous slice of the items
"""

import os
from collections.abc import Sequence
from typing import TypeVar

from nemo_launcher.contract.schemas.multimodal_data import MultimodalDataConfig

from ..steps.config import DataConfigError, load_bound

T = TypeVar("T")


def load_config(step: str, argv: Sequence[str] = None) -> MultimodalDataConfig:
    return load_bound(MultimodalDataConfig, f"nemo_launcher.jobs.multimodal.{step}", argv)


def array_tasks(cfg: MultimodalDataConfig, step: str, env=None) -> tuple[list[int], int]:
    """(task ids this process plays, task count of the partition): override_task_id when set, else the Slurm array
    task, else every task the step's node_array_size names, one after another (a run on this machine)."""
    env = os.environ if env is None else env
    ids, count = cfg.partition(step, f"data_preparation.{step}")
    task = env.get("SLURM_ARRAY_TASK_ID")
    if cfg.override_task_id is not None or task is None:
        return ids, count
    if not task.isdigit() or int(task) not in ids:
        raise DataConfigError(
            f"SLURM_ARRAY_TASK_ID={task!r} is not one of the tasks data_preparation.{step}."
            f"node_array_size names ({ids[0]}-{ids[-1]}); the --array range must come from the same config"
        )
    return [int(task)], count


def share(items: Sequence[T], task: int, count: int) -> list[T]:
    """Task `task` of `count`'s contiguous slice; the slices of all tasks cover the items once, in order."""
    return list(items[task * len(items) // count : (task + 1) * len(items) // count])


def local_process(env=None) -> tuple[int, int]:
    """(rank, processes) among the processes of one array task: srun's SLURM_LOCALID, or torchrun's LOCAL_RANK."""
    env = os.environ if env is None else env
    for rank_name, size_name in (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")):
        rank, size = env.get(rank_name, ""), env.get(size_name, "")
        if rank.isdigit() and size.isdigit() and int(size) > 0:
            return int(rank), int(size)
    return 0, 1


def strided_share(items: Sequence[T], env=None) -> tuple[list[T], str]:
    """download_images: array task i of N takes items i, i+N, ...; (items, what this process is, for the log).
    N is the array's size as Slurm ran it, so files found beyond the size the launcher guessed are still taken."""
    env = os.environ if env is None else env
    task, last = env.get("SLURM_ARRAY_TASK_ID"), env.get("SLURM_ARRAY_TASK_MAX")
    if task is not None and task.isdigit() and last is not None and last.isdigit():
        count = int(last) + 1
        return list(items[int(task) :: count]), f"array task {task} of {count}"
    rank, world = env.get("RANK"), env.get("WORLD_SIZE")
    if rank is not None and world is not None and rank.isdigit() and world.isdigit():
        return list(items[int(rank) :: int(world)]), f"rank {rank} of {world}"
    return list(items), "every task"
