"""Run directories of another user are refused before anything is written, naming the directory, its owner and
the fix (exit 6). The second user is real: created with useradd for the test (CI runs as root) and removed after.

The launcher runs as that user through `runuser`. The interpreter's installation may sit under /root, which
other users cannot enter: it is bind-mounted read-only at a neutral place for the test.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import skip_or_fail

from .test_submission import _calls, _fake_slurm, fake_path  # noqa: F401  (fixture)

TINY = ["stages=[training,conversion]", "training=gpt3/tiny", "++check_inputs=false"]


def _need_root():
    if os.geteuid() != 0:
        skip_or_fail("creating a second user and changing file owners needs root", "CI runs the suite as root")
    for tool in ("useradd", "userdel", "runuser", "mount"):
        if shutil.which(tool) is None:
            skip_or_fail(f"`{tool}` is not on PATH", "CI's Debian image has it (passwd, util-linux)")


def _tree(root: Path):
    """Every path under root with its owner and mode: what 'nothing was written' compares."""
    return {p: (p.stat().st_uid, p.stat().st_mode, p.stat().st_mtime_ns) for p in [root, *root.rglob("*")]}


def test_run_directory_of_another_user_is_refused(fake_path, launch, tmp_path):
    _need_root()
    log = _fake_slurm(fake_path)
    results = tmp_path / "results"
    run_dir = results / "gpt3_tiny"
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o777)  # a group umask (002) would leave it writable: ownership alone must stop the run
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(run_dir, nobody, nobody)
    before = _tree(results)
    for debug in (True, False):
        code, out, err = launch(TINY, debug=debug, results=results)
        assert code == 6, err
        assert err.strip() == (
            f"Error: run directory {run_dir} belongs to user nobody, not to root: use another run name "
            "(training.run.name) or base_results_dir, or ask the owner"
        )
        assert _tree(results) == before
    assert not _calls(log, "sbatch")


def test_nested_job_directory_of_another_user_is_refused(launch, tmp_path):
    _need_root()
    results = tmp_path / "results"
    theirs = results / "gpt3_tiny" / "convert_nemo"
    theirs.mkdir(parents=True)
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    before = _tree(results)
    code, out, err = launch(TINY, debug=True, results=results)
    assert code == 6 and f"run directory {theirs} belongs to user nobody" in err and "(conversion.run.name)" in err
    assert _tree(results) == before


@contextmanager
def _second_user():
    name = f"nlt{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@contextmanager
def _python_for_everyone(scratch: Path):
    """(interpreter, environment) another user can run: this interpreter's installation, bind-mounted read-only."""
    if sys.prefix != sys.base_prefix:
        skip_or_fail(
            "the test runs this interpreter as another user, which a virtual environment does not support",
            "CI runs the suite with the system or pyenv interpreter",
        )
    mount = scratch / "python"
    mount.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", sys.base_prefix, str(mount)], check=True)
    try:
        executable = mount / Path(os.path.realpath(sys.executable)).relative_to(os.path.realpath(sys.base_prefix))
        # Its libpython is found through an absolute RUNPATH under the original prefix: point the loader here.
        yield str(executable), {"LD_LIBRARY_PATH": str(mount / "lib"), "PATH": "/usr/bin:/bin"}
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_second_user_is_refused_in_a_shared_results_dir(tmp_path):
    _need_root()
    # Outside /tmp/pytest-of-root, which only root may enter.
    scratch = Path(tempfile.mkdtemp(prefix="nemo-launcher-owner-", dir="/tmp"))
    try:
        scratch.chmod(0o755)
        results = scratch / "results"
        run_dir = results / "gpt3_tiny"
        run_dir.mkdir(parents=True)
        results.chmod(0o777)  # the shared base_results_dir: everyone may create runs in it
        run_dir.chmod(0o775)
        with _second_user() as user, _python_for_everyone(scratch) as (python, environment):

            def launcher(*overrides):
                env = dict(environment, NEMO_LAUNCHER_DEBUG="1")
                argv = [
                    "runuser",
                    "-u",
                    user,
                    "--",
                    "env",
                    *[f"{k}={v}" for k, v in env.items()],
                    python,
                    "main.py",
                    *TINY,
                    f"base_results_dir={results}",
                    *overrides,
                ]
                return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)

            before = _tree(results)
            refused = launcher()
            assert refused.returncode == 6, refused.stderr
            assert refused.stderr.strip().splitlines()[-1] == (
                f"Error: run directory {run_dir} belongs to user root, not to {user}: use another run name "
                "(training.run.name) or base_results_dir, or ask the owner"
            )
            assert "Traceback" not in refused.stderr
            assert _tree(results) == before

            # Another run name in the same shared folder is the user's own: accepted, and owned by them.
            accepted = launcher("training.run.name=mine")
            assert accepted.returncode == 0, accepted.stderr
            assert (results / "mine").stat().st_uid == pwd.getpwnam(user).pw_uid

            # A results folder the user may not write (umask 022): one line, not a PermissionError traceback.
            results.chmod(0o755)
            denied = launcher("training.run.name=other")
            assert denied.returncode == 6, denied.stderr
            assert denied.stderr.strip().splitlines()[-1] == f"Error: cannot write {results}/other: Permission denied"
            assert not (results / "other").exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
