"""Checkpoint folders: `<explicit_log_dir>/checkpoints/step-<N>/`, complete once `COMPLETE` is in them.

    folder = CheckpointFolder(Path(log_dir) / "checkpoints")
    folder.newest_complete()          -> Path(".../step-40") or None
    folder.path(60); ...save...; folder.mark_complete(60, {...}); folder.prune(keep=10)

    folder.newest_verified()          -> (Path(".../step-20"), {Path(".../step-40"): ["common.pt: missing"]})

A save that dies half way (kill -9, node failure) leaves a step folder without the marker; it is never
resumed from and is deleted by the next prune or overwritten by the next save of that step. The marker is
written last, by one rank, after every rank has finished writing, and atomically (write, fsync, rename).
It lists every file's size and checksum (checkpoint_manifest.py), so a checkpoint damaged after its save (a
truncated copy, a lost file, zeroed blocks) is found before a resume loads it. A damaged one is set aside as
`step-<N>.damaged`, out of every listing here, and kept for a look.
Only the file system is touched here, so the rules are tested without torch.
"""

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ...contract import CHECKPOINT_COMPLETE_MARKER, CHECKPOINT_STEP_PREFIX
from . import checkpoint_manifest

MARKER = CHECKPOINT_COMPLETE_MARKER
FILES_KEY = "files"  # the marker's record of every file: {name: {"bytes": .., "crc32": ..}}
DAMAGED_SUFFIX = ".damaged"
_STEP_DIR = re.compile(re.escape(CHECKPOINT_STEP_PREFIX) + r"(\d+)")


def alone(share: list) -> list[list]:
    """The gather of a job with one process: its own share is all there is."""
    return [share]


class CheckpointFolder:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, step: int) -> Path:
        return self.root / f"{CHECKPOINT_STEP_PREFIX}{step}"

    def steps(self, complete: bool = True) -> list[int]:
        """Steps that have a folder (only complete ones by default), ascending."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            match = _STEP_DIR.fullmatch(entry.name)
            if match and entry.is_dir() and (not complete or (entry / MARKER).is_file()):
                found.append(int(match.group(1)))
        return sorted(found)

    def newest_complete(self) -> Path | None:
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def damage(self, path: Path, rank: int = 0, world_size: int = 1, gather: Callable = alone) -> list[str]:
        """How the complete checkpoint at `path` differs from what its save recorded, one `<file>: <what>` per
        damaged file ([] when it matches). Collective when `gather` is: every rank checks the files it owns
        (checkpoint_manifest.owner) and `gather` (all_gather_object) gives every rank the same answer."""
        try:
            files = self.read_info(path).get(FILES_KEY)
            # A marker written before files were recorded has no list: such a checkpoint is trusted, as it was then.
            mine = checkpoint_manifest.check(path, files, rank, world_size) if files is not None else []
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as error:
            # Not JSON, or JSON of another shape (a list, a record without its sizes): the marker itself is damaged.
            # Every rank that meets it says so; the same words from several ranks count once.
            why = getattr(error, "strerror", None) or f"{type(error).__name__}: {error}"
            mine = [f"{MARKER}: unreadable ({why})"]
        return sorted({problem for share in gather(mine) for problem in share})

    def newest_verified(
        self, rank: int = 0, world_size: int = 1, gather: Callable = alone
    ) -> tuple[Path | None, dict[Path, list[str]]]:
        """The newest complete checkpoint that matches its marker (None when none does), and the damage found in
        the newer ones, newest first. Collective when `gather` is (see damage)."""
        damaged = {}
        for step in reversed(self.steps()):
            problems = self.damage(self.path(step), rank, world_size, gather)
            if not problems:
                return self.path(step), damaged
            damaged[self.path(step)] = problems
        return None, damaged

    def set_aside(self, path: Path) -> Path:
        """Renames a damaged checkpoint to `step-<N>.damaged`: no listing, prune or resume sees it again, and its
        files stay for whoever wants to know what happened (an older copy set aside at the same step is replaced).
        One rank only."""
        aside = Path(path).with_name(Path(path).name + DAMAGED_SUFFIX)
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(path, aside)
        return aside

    def prepare(self, step: int) -> Path:
        """An empty folder for `step` (a leftover of an interrupted save of the same step is removed). One rank only."""
        target = self.path(step)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        return target

    def mark_complete(self, step: int, info: dict) -> None:
        """Called by one rank once every rank's files are written."""
        target = self.path(step)
        temporary = target / f".{MARKER}.tmp"
        with open(temporary, "w") as handle:
            json.dump(info, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target / MARKER)
        _fsync_dir(target)

    def update_info(self, step: int, **changes) -> None:
        """Rewrites a complete checkpoint's marker with `changes` merged in (atomically: it stays complete)."""
        self.mark_complete(step, {**self.read_info(self.path(step)), **changes})

    def read_info(self, path: Path) -> dict:
        with open(Path(path) / MARKER) as handle:
            return json.load(handle)

    def remove_incomplete(self) -> list[Path]:
        """Deletes every step folder without the marker: saves that failed or were killed. One rank only, and only
        by the run directory's lock holder (no other job can be writing one). Returns what was deleted."""
        complete = set(self.steps())
        removed = []
        for step in self.steps(complete=False):
            if step not in complete:
                shutil.rmtree(self.path(step), ignore_errors=True)
                removed.append(self.path(step))
        return removed

    def prune(self, keep: int, monitor: str = "step") -> list[Path]:
        """Deletes all but `keep` complete checkpoints (keep -1: none), and incomplete folders older than the newest
        complete one (failed saves). Returns what was deleted. One rank only.

        monitor step keeps the newest; val_loss keeps the `keep` best by the validation loss recorded with each
        (lowest first), checkpoints without one ranked last, and always the newest, which resuming needs."""
        complete = self.steps()
        if keep < 0:
            doomed = []
        elif monitor == "step":
            doomed = complete[:-keep] if keep > 0 else list(complete)
        else:
            losses = {step: self.read_info(self.path(step)).get(monitor) for step in complete}
            ranked = sorted(complete, key=lambda s: (losses[s] is None, losses[s] or 0.0, -s))
            kept = set(ranked[:keep]) | set(complete[-1:])
            doomed = [step for step in complete if step not in kept]
        newest = complete[-1] if complete else None
        if newest is not None:
            doomed += [s for s in self.steps(complete=False) if s < newest and s not in complete]
        removed = []
        for step in sorted(set(doomed)):
            shutil.rmtree(self.path(step), ignore_errors=True)
            removed.append(self.path(step))
        return removed


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
