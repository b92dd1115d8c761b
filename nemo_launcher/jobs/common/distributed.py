"""Where this process sits in the job, read from the environment its launcher set, and joining the group.

    placement = placement_from_env()          # torchrun, Slurm (srun) or a single process
    init_process_group(placement, "gloo")     # "nccl" on GPUs

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT. Slurm sets SLURM_PROCID/SLURM_NTASKS/
SLURM_LOCALID and our Slurm script exports MASTER_ADDR/MASTER_PORT. torchrun wins when both are present:
the interactive backend runs torchrun inside a Slurm allocation, and there SLURM_NTASKS counts the
allocation's tasks, not torchrun's workers.
"""

import dataclasses
import datetime
import os
import socket
from collections.abc import Mapping

from .config import JobConfigError


@dataclasses.dataclass(frozen=True)
class Placement:
    rank: int  # global rank, 0 .. world_size - 1
    world_size: int  # number of processes in the job
    local_rank: int  # rank among the processes of this node; picks the GPU
    master_addr: str  # host of rank 0, where the rendezvous store listens
    master_port: int  # TCP port of that store
    source: str  # "torchrun", "slurm" or "single": which launcher's variables were read

    def __post_init__(self):
        if not 0 <= self.rank < self.world_size:
            raise JobConfigError(
                f"rank {self.rank} is outside world size {self.world_size} (from {self.source} variables)"
            )


def placement_from_env(env: Mapping[str, str] | None = None) -> Placement:
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return Placement(
            rank=_int(env, "RANK"),
            world_size=_int(env, "WORLD_SIZE"),
            local_rank=_int(env, "LOCAL_RANK", 0),
            master_addr=_required(env, "MASTER_ADDR", "torchrun"),
            master_port=_int(env, "MASTER_PORT"),
            source="torchrun",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world_size = _int(env, "SLURM_NTASKS")
        if world_size > 1 or "MASTER_ADDR" in env:
            return Placement(
                rank=_int(env, "SLURM_PROCID"),
                world_size=world_size,
                local_rank=_int(env, "SLURM_LOCALID", 0),
                master_addr=_required(env, "MASTER_ADDR", "Slurm"),
                master_port=_int(env, "MASTER_PORT"),
                source="slurm",
            )
    # A process of its own: its store lives in the process (init_process_group); the port is only what Lightning
    # is told, never bound.
    return Placement(
        rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=free_port(), source="single"
    )


def _required(env: Mapping[str, str], name: str, launcher: str) -> str:
    value = env.get(name)
    if not value:
        raise JobConfigError(f"{name} is not set: under {launcher} with several processes the script must export it")
    return value


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None:
        if default is None:
            raise JobConfigError(f"environment variable {name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise JobConfigError(f"environment variable {name}={value!r} is not an integer") from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(placement: Placement, backend: str, timeout_minutes: int = 30) -> None:
    """Joins the default process group; rank and size come from `placement`, not from torch's env parsing."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    # torch's env:// rendezvous reads these two; setting them keeps every path (gloo subgroups too) consistent.
    os.environ["MASTER_ADDR"] = placement.master_addr
    os.environ["MASTER_PORT"] = str(placement.master_port)
    # A process of its own needs no TCP store: the port free_port() saw free can be taken by another job's
    # store or an outgoing connection before ours binds it (EADDRINUSE, seen under a busy test run).
    store = dist.HashStore() if placement.source == "single" else None
    dist.init_process_group(
        backend=backend,
        rank=placement.rank,
        world_size=placement.world_size,
        store=store,
        timeout=datetime.timedelta(minutes=timeout_minutes),
    )
