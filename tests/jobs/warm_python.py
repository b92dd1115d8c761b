"""Job programs started by the job tests run in forks of a warm interpreter, not in fresh ones.

Every job process starts by importing torch, megatron-core and PyTorch Lightning: about 3 s of CPU time, most of
what a tiny test training costs, paid some hundreds of times per CI run on its two cores. Here each pytest worker
starts one warm interpreter (warm_server.py) that imports them once, and the tests' commands name a stand-in
interpreter (warm_shim.py) in place of `sys.executable`: `<stand-in> -u -m nemo_launcher.jobs.gpt.train --config
...` runs the program in a fork of the warm interpreter, with the command's streams, environment, directory,
signals and exit status, so a test cannot tell it from a fresh process but by its parent. torchrun started this
way starts its ranks through the stand-in as well.

What forks cannot show is left to fresh processes: what a program imports and how long it takes to start
(tests/jobs/common/test_import_hooks.py, benchmarks/job_startup_cost.py), a job killed and rerun (its run lock
must see the killed process gone at once: `start_training`'s programs and the fault tests start fresh ones), and
the whole path a user takes (the quick-start and Slurm tests run main.py and its scripts unchanged).

    command = [warm_python.interpreter(), "-u", "-m", module, "--config", str(config)]
    subprocess.run(command, env=warm_python.environment(env), ...)

NEMO_LAUNCHER_TEST_WARM=0 turns it off: the commands then name `sys.executable`.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .warm_shim import SOCKET_VARIABLE

REPO = Path(__file__).resolve().parents[2]
# The environment as the worker started, before any test changed it: the warm interpreter's imports must not see a
# variable that a test set for itself while it happened to start the server.
_WORKER_ENVIRONMENT = dict(os.environ)
_started: dict[str, object] = {}


def job_environment(base: dict[str, str]) -> dict[str, str]:
    """`base` as a job program of the tests runs: one thread per process, the repository importable, no dry run."""
    env = dict(base, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    return env


def _enabled() -> bool:
    return os.environ.get("NEMO_LAUNCHER_TEST_WARM", "1") != "0"


def _start() -> None:
    folder = Path(tempfile.mkdtemp(prefix="warm-"))  # short: a Unix socket's path has at most 107 bytes
    socket_path = folder / "socket"
    stand_in = folder / "python"
    source = (Path(__file__).with_name("warm_shim.py")).read_text()
    source = source.replace("REAL_PYTHON = sys.executable", f"REAL_PYTHON = {sys.executable!r}", 1)
    stand_in.write_text(f"#!{sys.executable} -SE\n{source}")
    stand_in.chmod(0o755)
    env = job_environment(_WORKER_ENVIRONMENT)
    log = open(folder / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.warm_server", str(socket_path)],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    if server.stdout.readline().strip() != "ready":
        server.wait(timeout=60)
        raise RuntimeError(f"the warm interpreter did not start:\n{(folder / 'server.log').read_text()[-3000:]}")

    def stop() -> None:
        server.stdin.close()  # the server kills what still runs and ends
        server.wait(timeout=30)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    _started.update(stand_in=str(stand_in), socket=str(socket_path))


def interpreter() -> str:
    """The interpreter to name in a job program's command: the stand-in, or `sys.executable` when turned off."""
    if not _enabled():
        return sys.executable
    if not _started:
        _start()
    return _started["stand_in"]


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with what the stand-in needs to find the warm interpreter (nothing when turned off)."""
    if not _enabled():
        return env
    interpreter()
    return {**env, SOCKET_VARIABLE: _started["socket"]}
