"""The PPO roles' saved states: one folder per actor step (`step-<N>`), complete once its marker is there. The actor
and the critic save and find their states alike, so that the actor's step N and the critic's state for it pair up."""

from pathlib import Path

from ...contract import CHECKPOINT_COMPLETE_MARKER, CHECKPOINT_STEP_PREFIX


def complete_step_folders(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete save under `root`, oldest first; none when `root` does not exist."""
    if not root.is_dir():
        return []
    found = []
    for folder in root.iterdir():
        suffix = folder.name[len(CHECKPOINT_STEP_PREFIX) :]
        if folder.name.startswith(CHECKPOINT_STEP_PREFIX) and suffix.isdigit():
            if (folder / CHECKPOINT_COMPLETE_MARKER).is_file():
                found.append((int(suffix), folder))
    return sorted(found)
