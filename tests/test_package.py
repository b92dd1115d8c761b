"""The project as a package (pyproject.toml): its `nemo-launcher` console script is `python3 -m nemo_launcher`, an
install of it works away from the checkout, and its metadata reads the pins from the requirements files.

    python3 -m pytest -n 0 tests/test_package.py
"""

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

import nemo_launcher.__main__ as module_main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPT = "nemo-launcher"


def _entry_point() -> str:
    return PYPROJECT["project"]["scripts"][SCRIPT]


def _env() -> dict:
    env = {key: value for key, value in os.environ.items() if key != "NEMO_LAUNCHER_RESULTS"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_the_console_script_is_the_function_python_m_runs():
    module_name, _, attribute = _entry_point().partition(":")
    assert getattr(importlib.import_module(module_name), attribute) is module_main.main
    assert module_main.CONSOLE_SCRIPT == SCRIPT
    # `python3 -m nemo_launcher` runs nemo_launcher/__main__.py as __main__: that file's main() is what it calls.
    help_page = subprocess.run(
        [sys.executable, "-m", "nemo_launcher", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert help_page.returncode == 0, help_page.stderr
    assert help_page.stdout.startswith("usage: python3 -m nemo_launcher ")
    for command in ("status", "logs", "cancel"):
        assert command in help_page.stdout


def _call_entry_point(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs the entry point the way an installed console script does: import it, call it, exit with its result."""
    module_name, _, attribute = _entry_point().partition(":")
    code = f"import sys; sys.argv[0] = {SCRIPT!r}; from {module_name} import {attribute}; sys.exit({attribute}())"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(), cwd=cwd, timeout=60
    )


def test_the_entry_point_answers_as_python_m_does(tmp_path):
    results = tmp_path / "results"
    script_help = _call_entry_point(["--help"], tmp_path)
    module_help = subprocess.run(
        [sys.executable, "-m", "nemo_launcher", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert script_help.returncode == module_help.returncode == 0
    assert script_help.stdout.replace(f"usage: {SCRIPT} ", "usage: python3 -m nemo_launcher ") == module_help.stdout
    # A RUN that no ledger knows: the same one-line user error and exit 2 from both.
    script_status = _call_entry_point(["status", "nosuchrun", "--results", str(results)], tmp_path)
    module_status = subprocess.run(
        [sys.executable, "-m", "nemo_launcher", "status", "nosuchrun", "--results", str(results)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert script_status.returncode == module_status.returncode == 2
    assert script_status.stderr == module_status.stderr
    assert "RUN='nosuchrun'" in script_status.stderr and len(script_status.stderr.splitlines()) == 1


def _installable_copy(target: Path) -> Path:
    """What `pip install .` reads, copied: building in the checkout itself would write build/ and *.egg-info there."""
    for name in ["pyproject.toml", "README.md", *(path.name for path in ROOT.glob("requirements*.txt"))]:
        shutil.copy(ROOT / name, target / name)
    shutil.copytree(ROOT / "nemo_launcher", target / "nemo_launcher", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_an_install_runs_nemo_launcher_away_from_the_checkout(tmp_path):
    source, prefix, elsewhere = tmp_path / "source", tmp_path / "installed", tmp_path / "elsewhere"
    for folder in (source, elsewhere):
        folder.mkdir()
    # --target: the package and its console script into one folder, leaving this interpreter's site-packages alone;
    # no build isolation and no dependencies, so nothing is downloaded (setuptools is the system's).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(prefix),
            str(_installable_copy(source)),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    script = prefix / "bin" / SCRIPT
    assert script.is_file()
    installed = sorted(path.name for path in prefix.iterdir())
    assert [name for name in installed if not name.startswith("nemo_launcher")] == ["bin"], installed
    env = {key: value for key, value in os.environ.items() if key not in ("NEMO_LAUNCHER_RESULTS", "PYTHONPATH")}
    env["PYTHONPATH"] = str(prefix)  # what site-packages is to a real install; the checkout is not on the path
    where = subprocess.run(
        [sys.executable, "-c", "import nemo_launcher; print(nemo_launcher.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(prefix)
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60)
    assert usage.returncode == 0 and usage.stdout.startswith(f"usage: {SCRIPT} "), usage.stderr
    # status away from the checkout: it reads the ledger of the results folder it is given.
    results = elsewhere / "results"
    listed = subprocess.run(
        [str(script), "status", "--results", str(results)],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert f"No pipeline is recorded in {results / '.ledger'}" in listed.stdout
    # Without --results: an install has no <repository>/results (it would lie in site-packages), so it asks for one.
    unnamed = subprocess.run(
        [str(script), "status"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60
    )
    assert unnamed.returncode == 2 and unnamed.stderr.startswith("Error: --results: not given"), unnamed.stderr
    assert len(unnamed.stderr.splitlines()) == 1 and str(prefix) in unnamed.stderr


def test_the_package_metadata_reads_the_requirement_files():
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"]["file"] == ["requirements-launch.txt"]
    extras = dynamic["optional-dependencies"]
    assert extras["jobs"]["file"] == ["requirements-jobs.txt"]
    assert extras["dev"]["file"] == ["requirements-jobs.txt", "requirements-test.txt"]
    read = {name for files in ([dynamic["dependencies"]], extras.values()) for entry in files for name in entry["file"]}
    for name in read:
        # setuptools reads these files as plain requirement lines: no -r/-c/--options, each line a pinned requirement.
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                requirement = Requirement(line)
                assert str(requirement.specifier).startswith("=="), f"{name}: {line!r} is not pinned"
    # requirements.txt and requirements-dev.txt only gather those files, so pip and the package install the same pins.
    includes = {
        name: [line for line in (ROOT / name).read_text().splitlines() if line and not line.startswith("#")]
        for name in ("requirements.txt", "requirements-dev.txt")
    }
    assert includes == {
        "requirements.txt": ["-r requirements-launch.txt", "-r requirements-jobs.txt"],
        "requirements-dev.txt": ["-r requirements.txt", "-r requirements-test.txt"],
    }


def test_plain_pytest_runs_what_ci_runs(monkeypatch):
    """The README's and CI's command is plain `python3 -m pytest`: the settings it needs live in pyproject.toml, and
    `-n auto` means two workers more than the cores (tests/conftest.py), as in CI."""
    options = PYPROJECT["tool"]["pytest"]["ini_options"]
    assert options["testpaths"] == ["tests"]
    addopts = options["addopts"].split()
    for option in ("-n", "auto", "--dist", "loadgroup", "--no-loadscope-reorder", "no:benchmark"):
        assert option in addopts
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    pytest_runs = [line for line in ci_lines if "python3 -m pytest" in line and not line.startswith("#")]
    assert pytest_runs == ['python3 -m pytest "$@" || status=$?']
    conftest = importlib.import_module("tests.conftest")
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert conftest.pytest_xdist_auto_num_workers(None) == len(os.sched_getaffinity(0)) + 2
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert conftest.pytest_xdist_auto_num_workers(None) is None  # xdist's own hook reads the variable
