"""Which checkpoint a training continues from: the newest complete one that matches what its save recorded.

    resume = resume_path(folder, cfg.exp_manager, placement.rank, placement.world_size, gather)
    -> Path(".../step-40"), or None to start from step 0

A damaged newest checkpoint (a truncated shard, a missing .metadata or common.pt, zeroed bytes) is set aside with
one warning line naming the file and what is wrong with it, and the next older one is tried. With none left,
exp_manager.on_all_checkpoints_damaged decides (contract/checkpoint_damage.py): fail stops the job with exit 74
and one `Error:` line naming the files and the fix, start_over trains from step 0. Never a traceback: before this,
megatron-core's loader died 50 lines deep naming no file, and every resubmission died the same way.

Collective when `gather` is (torch.distributed.all_gather_object): every rank checks the files it owns and all
agree on the verdict; rank 0 alone warns and renames. Standard library only, so it is tested without torch.
"""

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from ...contract import RESUME_MARKER
from ...contract.binding import JobConfigError
from ...contract.checkpoint_damage import ALL_CHECKPOINTS_DAMAGED_KEY, DAMAGED_CHECKPOINTS_EXIT_CODE
from ..common.report import JobFault
from .checkpoints import CheckpointFolder, alone

log = logging.getLogger("nemo_launcher.jobs.core")

# A warning or error line names at most this many damaged files of one checkpoint (a wiped disk damages them all).
_NAMED_FILES = 3


class DamagedCheckpoints(JobFault):
    """Every complete checkpoint of the run differs from what its save recorded, and the config says fail."""

    exit_code = DAMAGED_CHECKPOINTS_EXIT_CODE


def resume_path(
    folder: CheckpointFolder,
    exp_manager,
    rank: int = 0,
    world_size: int = 1,
    gather: Callable = alone,
    warn: Callable[[str], None] = log.warning,
) -> Path | None:
    """The checkpoint to continue from, or None to start fresh, per the exp_manager.resume_* keys and
    on_all_checkpoints_damaged. Raises DamagedCheckpoints (exit 74) or JobConfigError (no checkpoint where one was
    required)."""
    if not exp_manager.resume_if_exists:
        return None
    newest, damaged = folder.newest_verified(rank, world_size, gather)
    if damaged and newest is None and exp_manager.on_all_checkpoints_damaged == "fail":
        _forget_resume(Path(exp_manager.explicit_log_dir), rank)
        raise DamagedCheckpoints(_refusal(damaged), echo=rank == 0)
    if rank == 0:
        instead = (
            f"resuming from {newest.name}" if newest else f"starting over ({ALL_CHECKPOINTS_DAMAGED_KEY}: start_over)"
        )
        for path, problems in damaged.items():
            aside = folder.set_aside(path)
            warn(f"checkpoint {path.name} is damaged ({_listed(path, problems)}); set aside as {aside.name}, {instead}")
    if newest is None and not damaged and not exp_manager.resume_ignore_no_checkpoint:
        raise JobConfigError(
            f"exp_manager.resume_ignore_no_checkpoint: false, and {folder.root} holds no complete "
            "checkpoint to resume from"
        )
    return newest


def _listed(path: Path, problems: list[str]) -> str:
    named = [f"{path / problem}" for problem in problems[:_NAMED_FILES]]
    more = len(problems) - len(named)
    return "; ".join(named) + (f"; and {more} more damaged files" if more else "")


def _refusal(damaged: dict[Path, list[str]]) -> str:
    each = "; ".join(f"{path.name}: {_listed(path, problems)}" for path, problems in damaged.items())
    return (
        f"every complete checkpoint differs from what its save recorded ({each}). Restore the damaged files from a "
        f"copy and submit again, or set {ALL_CHECKPOINTS_DAMAGED_KEY}=start_over to set them aside and train "
        "from step 0"
    )


def _forget_resume(log_dir: Path, rank: int) -> None:
    """An earlier attempt that stopped on a signal left RESUME_MARKER: the Slurm script would requeue a job that can
    only meet the same files again."""
    if rank == 0:
        # Best effort: the refusal is what the user must see, not a second error about this file.
        with contextlib.suppress(OSError):
            (log_dir / RESUME_MARKER).unlink(missing_ok=True)
