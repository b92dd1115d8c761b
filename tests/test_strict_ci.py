"""Strict mode (tests/conftest.py): what skips on a laptop fails under CI, and no skip passes CI unnoticed.

python3 -m pytest -q tests/test_strict_ci.py
"""

import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import STRICT_ENV, require_module, skip_or_fail, strict_ci

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")
ABSENT = "nemo_launcher_test_no_such_module"


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    monkeypatch.delenv("NEMO_LAUNCHER_TEST_SLURM", raising=False)


@pytest.fixture
def lenient(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.delenv("NEMO_LAUNCHER_TEST_SLURM", raising=False)


@pytest.fixture
def broken_modules(tmp_path, monkeypatch):
    """Two importable-looking modules: one whose own import fails (a missing dependency), one that raises."""
    (tmp_path / "nl_test_needs_missing_dep.py").write_text(f"import {ABSENT}\n")
    (tmp_path / "nl_test_raises_at_import.py").write_text("raise RuntimeError('built against another ABI')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("nl_test_needs_missing_dep", "nl_test_raises_at_import"):
        sys.modules.pop(name, None)


def test_strict_mode_comes_from_either_variable(monkeypatch, lenient):
    assert not strict_ci()
    monkeypatch.setenv(STRICT_ENV, "1")
    assert strict_ci()
    monkeypatch.delenv(STRICT_ENV)
    monkeypatch.setenv("NEMO_LAUNCHER_TEST_SLURM", "required")
    assert strict_ci()


def test_an_installed_module_is_returned(strict):
    import json

    assert require_module("json") is json


def test_missing_module_fails_under_strict_mode(strict):
    with pytest.raises(pytest.fail.Exception) as failure:
        require_module(ABSENT)
    message = str(failure.value)
    assert f"`{ABSENT}` is not installed" in message
    assert f"{STRICT_ENV}=1" in message and "pip install -r requirements-dev.txt" in message


def test_missing_module_skips_elsewhere(lenient):
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_module(ABSENT)
    assert f"`{ABSENT}` is not installed" in str(skipped.value)
    assert "pip install -r requirements-dev.txt" in str(skipped.value)


def test_installed_module_whose_import_fails_names_the_cause(strict, broken_modules):
    with pytest.raises(pytest.fail.Exception) as failure:
        require_module("nl_test_needs_missing_dep")
    assert "`nl_test_needs_missing_dep` is installed but does not import (ModuleNotFoundError:" in str(failure.value)
    assert ABSENT in str(failure.value)


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_a_module_raising_at_import_fails_everywhere(request, mode, broken_modules):
    request.getfixturevalue(mode)
    with pytest.raises(pytest.fail.Exception, match=r"RuntimeError: built against another ABI"):
        require_module("nl_test_raises_at_import")


def test_skip_or_fail_says_what_is_missing_and_how_ci_sets_it_up(monkeypatch, lenient):
    with pytest.raises(pytest.skip.Exception, match="no widget; CI installs one"):
        skip_or_fail("no widget", "CI installs one")
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(
        pytest.fail.Exception, match=f"no widget. Under {STRICT_ENV}=1 \\(CI\\) this must not skip: CI installs one"
    ):
        skip_or_fail("no widget", "CI installs one")


# ---- the session check, in a child pytest ------------------------------------------------------------------

CHILD_TESTS = """\
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("no widget here")

@pytest.mark.skipif(True, reason="marker skip")
def test_marked():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
"""


def _child_pytest(tmp_path, strict_mode: bool, allowed: str = "{}") -> subprocess.CompletedProcess:
    conftest = CONFTEST.read_text()
    assert "\nALLOWED_SKIPS = {}\n" in conftest, "the allow list moved; update this test"
    (tmp_path / "conftest.py").write_text(conftest.replace("\nALLOWED_SKIPS = {}\n", f"\nALLOWED_SKIPS = {allowed}\n"))
    (tmp_path / "test_child.py").write_text(CHILD_TESTS)
    (tmp_path / "test_skipped_module.py").write_text(
        textwrap.dedent("""\
            import pytest
            pytest.skip("whole module needs a widget", allow_module_level=True)
            """)
    )
    # The copied conftest imports the project (its warning filters), as the real one does from the repository root.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(CONFTEST.parent.parent)}
    if strict_mode:
        env[STRICT_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )


def test_any_skip_fails_a_strict_session_and_is_listed(tmp_path):
    result = _child_pytest(tmp_path, strict_mode=True)
    assert result.returncode == 1, result.stdout
    assert "3 skipped under NEMO_LAUNCHER_TEST_STRICT=1 (CI), which fails the run" in result.stdout
    assert "SKIPPED test_child.py::test_skips: no widget here" in result.stdout
    assert "SKIPPED test_child.py::test_marked: marker skip" in result.stdout
    assert "SKIPPED test_skipped_module.py: whole module needs a widget" in result.stdout
    assert "test_expected_failure" not in result.stdout.split("which fails the run", 1)[1]


def test_skips_pass_a_lenient_session(tmp_path):
    result = _child_pytest(tmp_path, strict_mode=False)
    assert result.returncode == 0, result.stdout
    assert "3 skipped" in result.stdout and "which fails the run" not in result.stdout


def test_skips_in_the_allow_list_pass_a_strict_session(tmp_path):
    allowed = '{"test_child.py::test_skips": "r", "test_child.py::test_marked": "r", "test_skipped_module.py": "r"}'
    result = _child_pytest(tmp_path, strict_mode=True, allowed=allowed)
    assert result.returncode == 0, result.stdout
    assert "which fails the run" not in result.stdout
