"""The launcher's own writes on a read-only or a full file system: one `Error: cannot write <path>: <reason>` line,
exit 6 (3 once a job was queued: then it is a rollback), no traceback, no temporary file left behind.

Real faults, not mocks: a tmpfs mounted read-only (EROFS) or filled up (ENOSPC). Mounting needs root, as CI has.
"""

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import skip_or_fail

from .test_submission import FOUR_STAGES, _calls, _fake_slurm, fake_path  # noqa: F401  (fixture)

TINY = ["stages=[training]", "training=gpt3/tiny", "++check_inputs=false"]


@contextmanager
def _tmpfs(where: Path, options: str):
    if os.geteuid() != 0:
        skip_or_fail("mounting a tmpfs needs root", "CI runs the suite as root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _fill(folder: Path) -> None:
    """Writes until the file system is full."""
    with open(folder / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass


def _temporary_files(root: Path):
    return [p for p in root.rglob("*") if ".tmp" in p.name]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("Warning:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("debug", [True, False], ids=["dry run", "real run"])
def test_read_only_base_results_dir(fake_path, launch, tmp_path, debug):
    log = _fake_slurm(fake_path)
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as read_only:
        code, out, err = launch(TINY, debug=debug, results=read_only / "results")
        assert code == 6, err
        assert _one_error_line(err) == f"Error: cannot write {read_only}/results: Read-only file system"
    assert not _calls(log, "sbatch")


def test_read_only_base_results_dir_from_the_command_line(tmp_path):
    # The whole program: the error used to escape from inside hydra.main as a Hydra traceback.
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as read_only:
        result = subprocess.run(
            [sys.executable, "main.py", *TINY, f"base_results_dir={read_only}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            env=dict(os.environ, NEMO_LAUNCHER_DEBUG="1"),
        )
    assert result.returncode == 6, result.stderr
    assert _one_error_line(result.stderr) == f"Error: cannot write {read_only}/gpt3_tiny: Read-only file system"


@pytest.mark.parametrize("debug", [True, False], ids=["dry run", "real run"])
def test_full_base_results_dir(fake_path, launch, tmp_path, debug):
    log = _fake_slurm(fake_path)
    with _tmpfs(tmp_path / "full", "size=64k") as full:
        _fill(full)
        code, out, err = launch(TINY, debug=debug, results=full / "results")
        assert code == 6, err
        line = _one_error_line(err)
        assert line.startswith(f"Error: cannot write {full}/results/gpt3_tiny/") and line.endswith(
            ": No space left on device"
        )
        assert not _temporary_files(full)
        assert not list((full / "results").glob(".ledger/*.json"))  # no record (a real run's lock file may stay)
    assert not _calls(log, "sbatch")


def test_disk_fills_up_after_the_first_submission(fake_path, launch, tmp_path):
    # The first sbatch fills the file system: launcher.log, the ledger and its closing all fail from then on.
    with _tmpfs(tmp_path / "small", "size=256k") as small:
        fill = f'dd if=/dev/zero of="{small}/filler" bs=4096 2>/dev/null; '
        log = _fake_slurm(fake_path, f'if [ "$n" -eq 1 ]; then {fill}fi; queue "$((500 + n))"; echo "$((500 + n))"')
        code, out, err = launch(FOUR_STAGES, debug=False, results=small / "results")
        assert code == 3, err
        line = _one_error_line(err)
        assert line.startswith(
            f"Error: cannot write {small}/results/gpt3_tiny/launcher.log: No space left on device "
            "(while submitting job 1 of 4 (training)); rolled back; "
        )
        assert "the ledger record could not be closed (cannot write " in line and "it was removed" in line
        assert line.endswith("cancelled the jobs already submitted (training): 501")
        assert _calls(log, "scancel") == ["scancel 501"] and len(_calls(log, "sbatch")) == 1
        assert not _temporary_files(small)
        # No record is left saying `submitting` for jobs that were cancelled.
        assert list((small / "results" / ".ledger").glob("*.json")) == []


def test_ledger_write_fails_after_a_submission(fake_path, launch, tmp_path):
    # Room for launcher.log (the page it appends to is written before the disk fills), none for the ledger.
    with _tmpfs(tmp_path / "small", "size=256k") as small:
        fill = (
            f'echo earlier > "{small}/results/gpt3_tiny/launcher.log"; '
            f'dd if=/dev/zero of="{small}/filler" bs=4096 2>/dev/null; '
        )
        log = _fake_slurm(fake_path, f'if [ "$n" -eq 1 ]; then {fill}fi; queue "$((500 + n))"; echo "$((500 + n))"')
        code, out, err = launch(FOUR_STAGES, debug=False, results=small / "results")
        assert code == 3, err
        line = _one_error_line(err)
        assert f"Error: cannot write {small}/results/.ledger/" in line and ".json: No space left on device" in line
        assert _calls(log, "scancel") == ["scancel 501"]
        assert not _temporary_files(small)
        assert "Submitted batch job 501" in (small / "results" / "gpt3_tiny" / "launcher.log").read_text()
        assert "the ledger record could not be closed" in line and "it was removed" in line
        assert list((small / "results" / ".ledger").glob("*.json")) == []
