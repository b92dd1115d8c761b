"""The PPO actor's checkpoints: everything a rerun needs to continue bit-identically from step N.

    save_actor_state(log_dir, step, {"policy": ..., "optimizer": ..., ...}, rank=tp_rank, writer=True)
    found = newest_actor_state(log_dir)        # (step, folder) of the newest complete save, or None
    state = load_actor_state(found[1], rank=tp_rank)

Layout: <exp_manager.explicit_log_dir>/ppo_checkpoints/step-<N>/rank_<r>.pt (one file per tensor-parallel rank: its
shard of the policy and its optimizer state; the rest is the same on every rank) and the COMPLETE marker, written
last. Each file is written under a temporary name and renamed, and the marker comes after every rank's file, so a
kill -9 at any moment leaves the newest step either complete or ignored; the one before it stays until a newer one is
complete (KEEP complete saves are kept). The folder is not the trainer core's checkpoints/step-<N> (a megatron-core
distributed checkpoint that conversion reads); the policy the run ends with goes to checkpoints/<name>.nemo.
"""

import os
import shutil
from pathlib import Path

import torch

from ...contract import CHECKPOINT_COMPLETE_MARKER, CHECKPOINT_STEP_PREFIX
from .step_folders import complete_step_folders

FOLDER = "ppo_checkpoints"
KEEP = 2


def state_root(log_dir) -> Path:
    return Path(log_dir) / FOLDER


def step_folder(log_dir, step: int) -> Path:
    return state_root(log_dir) / f"{CHECKPOINT_STEP_PREFIX}{step}"


def save_actor_state(log_dir, step: int, state: dict, rank: int, writer: bool) -> None:
    """Writes this rank's file of step `step` (only ranks with writer=True: one per tensor-parallel rank). The caller
    calls mark_complete once every rank's file is written (after a barrier when there are several)."""
    folder = step_folder(log_dir, step)
    if not writer:
        return
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"rank_{rank}.pt"
    temporary = folder / f".rank_{rank}.pt.tmp{os.getpid()}"
    torch.save(state, temporary)
    os.replace(temporary, target)


def mark_complete(log_dir, step: int, keep: int = KEEP) -> None:
    """The step's marker (after all its files), then all but the newest `keep` complete saves are removed
    (-1: none)."""
    folder = step_folder(log_dir, step)
    marker = folder / CHECKPOINT_COMPLETE_MARKER
    temporary = folder / f".{CHECKPOINT_COMPLETE_MARKER}.tmp"
    temporary.write_text(f"PPO actor state after step {step}\n")
    os.replace(temporary, marker)
    if keep > 0:
        for _, old in complete_states(log_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def complete_states(log_dir) -> list[tuple[int, Path]]:
    """(step, folder) of every complete save, oldest first."""
    return complete_step_folders(state_root(log_dir))


def newest_actor_state(log_dir) -> tuple[int, Path] | None:
    states = complete_states(log_dir)
    return states[-1] if states else None


def load_actor_state(folder: Path, rank: int) -> dict:
    # weights_only=False: the state holds Python RNG states and metric records besides tensors; the file is this
    # run's own.
    return torch.load(folder / f"rank_{rank}.pt", map_location="cpu", weights_only=False)
