"""Room for the next checkpoint, checked before each save, and a failed save explained instead of a traceback.

    space = CheckpointSpace(folder, parts)
    space.prepare(step)              # collective: rank 0 clears failed saves, checks free space, makes step-<N>
    try:
        ...every rank writes...
    except BaseException as error:   # torch.distributed.checkpoint's CheckpointException is no Exception
        space.failed(step, error)    # raises StorageFault when space or permission was the cause
        raise

A checkpoint needs about as much as the last complete one; the first is estimated from the parameters and
Adam's state (two fp32 moments per parameter, plus fp32 master weights under bf16/fp16). Whatever happens,
the complete checkpoints stay as they were: a save that fails leaves a step folder without its COMPLETE
marker, which is never resumed from and is removed here (it is what filled the disk).
"""

import contextlib
import shutil
from pathlib import Path

import torch

from ..common.report import size_of
from ..common.storage import StorageFault, check_room, storage_errno, storage_fault, with_margin
from .checkpoints import CheckpointFolder

# What rank 0 tells the others after preparing a save.
_OK, _FAULT, _CRASH = 0.0, 1.0, 2.0


class CheckpointSpace:
    def __init__(self, folder: CheckpointFolder, parts):
        self.folder = folder
        self.parts = parts
        self._sizes: dict[Path, int] = {}  # bytes of complete checkpoints already measured
        self._estimate: int | None = None  # of a whole checkpoint, all ranks' shards together
        self.needed = 0  # bytes asked for before the last save

    # ---- before a save --------------------------------------------------------------------------------
    def prepare(self, step: int) -> Path:
        """Collective. Rank 0 removes failed saves, checks that the checkpoint fits and creates its folder; every
        rank then learns whether that worked, so all go on to save, or all raise StorageFault (only rank 0 says
        why). Doubles as the barrier that keeps ranks from writing before the folder exists."""
        estimate = self._checkpoint_estimate()
        if self.parts.placement.rank != 0:
            verdict = self._share(_OK)
            if verdict == _FAULT:
                raise StorageFault(f"rank 0 could not prepare checkpoint step-{step}", echo=False)
            if verdict != _OK:
                raise RuntimeError(f"rank 0 failed while preparing checkpoint step-{step}; its log says why")
            return self.folder.path(step)
        try:
            self.folder.remove_incomplete()
            self.needed = with_margin(self._last_size() or estimate)
            check_room(self.folder.root, self.needed, f"checkpoint step-{step}", self.advice())
            self.folder.prepare(step)
        except Exception as error:
            fault = error if isinstance(error, StorageFault) else self._explained(step, error)
            self._share(_CRASH if fault is None else _FAULT)
            if fault is None:
                raise
            self._forget_resume()
            raise fault from (None if fault is error else error)
        self._share(_OK)
        return self.folder.path(step)

    def _explained(self, step: int, error: BaseException) -> StorageFault | None:
        if storage_errno(error) is None:
            return None
        return storage_fault(error, self.folder.root, self.needed, f"checkpoint step-{step}", self.advice())

    def _share(self, verdict: float) -> float:
        if self.parts.placement.world_size == 1:
            return verdict
        flag = torch.tensor([verdict], dtype=torch.float64, device=self.parts.device)
        torch.distributed.broadcast(flag, src=0)
        return float(flag.item())

    def _checkpoint_estimate(self) -> int:
        """Weights plus Adam state of every distinct shard (data-parallel replicas counted once). Collective the
        first time."""
        if self._estimate is None:
            p = self.parts
            local = 0
            if p.dp_rank == 0:
                extra = 8 + (4 if p.cfg.trainer.precision_name() != "fp32" else 0)  # moments (+ fp32 master)
                local = sum(
                    t.numel() * (t.element_size() + extra) for chunk in p.bare_chunks for t in chunk.parameters()
                )
            total = torch.tensor([float(local)], dtype=torch.float64, device=p.device)
            if p.placement.world_size > 1:
                torch.distributed.all_reduce(total)
            self._estimate = int(total.item())
        return self._estimate

    def _last_size(self) -> int | None:
        newest = self.folder.newest_complete()
        if newest is None:
            return None
        if newest not in self._sizes:
            self._sizes[newest] = size_of(newest)
        return self._sizes[newest]

    # ---- after a save ---------------------------------------------------------------------------------
    def saved(self, step: int) -> None:
        """Rank 0, once step-<N> is complete: its size is what the next save asks for."""
        path = self.folder.path(step)
        self._sizes[path] = size_of(path)

    def failed(self, step: int, error: BaseException) -> None:
        """Any rank whose save raised: a StorageFault when space or permission was the cause (the incomplete
        folder is removed, so the error line can still be written to a log on the same disk), else returns."""
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            return
        # What was asked for came from the last checkpoint, which a changed model may have outgrown.
        needed = max(self.needed, with_margin(self._estimate) if self._estimate else 0)
        fault = storage_fault(error, self.folder.root, needed, f"checkpoint step-{step}", self.advice())
        if fault is None:
            return
        # torch.distributed.checkpoint gathers every rank's write failures and raises them on all ranks: rank 0
        # speaks for them. A failure of this rank alone is said by this rank.
        fault.echo = self.parts.placement.rank == 0 or not hasattr(error, "failures")
        shutil.rmtree(self.folder.path(step), ignore_errors=True)
        self._forget_resume()
        raise fault from error

    def advice(self) -> str:
        newest = self.folder.newest_complete()
        kept = (
            f"The newest complete checkpoint, {newest.name}, is kept"
            if newest is not None
            else "No complete checkpoint exists yet"
        )
        keep_key = "exp_manager.checkpoint_callback_params.save_top_k"
        return (
            f"{kept} and the job does not requeue itself. Free space there (or lower {keep_key}, or use a larger "
            f"file system for base_results_dir), then submit the same command again"
            + (" to resume from it." if newest is not None else ".")
        )

    def _forget_resume(self) -> None:
        """The Slurm script requeues while RESUME_MARKER exists; a job that cannot save would loop."""
        from ...contract import RESUME_MARKER

        # Best effort: this runs while the job is already failing for lack of space; its own error is the one to report.
        with contextlib.suppress(OSError):
            (Path(self.parts.cfg.exp_manager.explicit_log_dir) / RESUME_MARKER).unlink(missing_ok=True)
