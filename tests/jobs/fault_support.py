"""Faults made real for the job tests: a small file system, other jobs' locks, snapshots of checkpoint folders.

with small_filesystem(tmp_path / "disk", "80m") as disk:     # a tmpfs of 80 MiB (root; CI runs as root)
    ...
plant_lock(run_dir, job_id="777")                            # a live foreign holder: this test process
snapshot(checkpoints) -> {"step-2/__0_0.distcp": (sha256, mtime_ns), ...}
"""

import contextlib
import dataclasses
import hashlib
import os
import subprocess
from pathlib import Path

from tests.conftest import skip_or_fail

ROOT_SETUP = "CI (.ci/run) runs as root, where `mount -t tmpfs` works"


@contextlib.contextmanager
def small_filesystem(path: Path, size: str):
    """A tmpfs of `size` (mount's syntax: 80m) at `path`, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        skip_or_fail("mounting a size-limited tmpfs needs root", ROOT_SETUP)
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        skip_or_fail(f"mount -t tmpfs failed: {mounted.stderr.strip()}", ROOT_SETUP)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # a straggler still has a file open


def plant_lock(directory: Path, **changes) -> Path:
    """Writes a lock as another job would: by default held by this (live) test process, outside Slurm."""
    from nemo_launcher.contract import RUN_LOCK_FILE
    from nemo_launcher.jobs.common.run_lock import this_process

    holder = dataclasses.replace(this_process(env={}), **changes)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_LOCK_FILE
    path.write_text(holder.to_json())
    return path


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder`: relative path -> (sha256 of its bytes, mtime in ns)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(folder))] = (digest, path.stat().st_mtime_ns)
    return found
