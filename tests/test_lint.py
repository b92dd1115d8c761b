"""The code passes the project's linter and formatter, as pinned (requirements-test.txt) and configured
(pyproject.toml's [tool.ruff]): no finding, no file to reformat. Fix what this reports with

    ruff check --fix . && ruff format .        # then edit by hand what `ruff check .` still lists
"""

import shutil
import subprocess
from pathlib import Path

from packaging.requirements import Requirement

from tests.conftest import INSTALL_FIX, skip_or_fail

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    """The ruff executable, after checking it is the version requirements-test.txt pins (another version's rules
    and formatting differ, so its verdict would not be CI's)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        skip_or_fail("`ruff` is not installed", INSTALL_FIX)
    (pin,) = [
        Requirement(line)
        for line in (ROOT / "requirements-test.txt").read_text().splitlines()
        if line.startswith("ruff")
    ]
    version = subprocess.run([ruff, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    assert pin.specifier.contains(version), (
        f"ruff {version} is installed, requirements-test.txt pins {pin}: {INSTALL_FIX}"
    )
    return ruff


def _run(args: list[str]) -> subprocess.CompletedProcess:
    # --no-cache: xdist workers and developers' runs would otherwise share .ruff_cache in the checkout.
    return subprocess.run([_ruff(), *args, "--no-cache", "."], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_ruff_check_finds_nothing():
    result = _run(["check", "--output-format", "concise"])
    assert result.returncode == 0, f"ruff check . (fix: ruff check --fix .):\n{result.stdout[-6000:]}{result.stderr}"


def test_ruff_format_would_change_nothing():
    result = _run(["format", "--check"])
    assert result.returncode == 0, (
        f"ruff format --check . (fix: ruff format .):\n{result.stdout[-6000:]}{result.stderr}"
    )
