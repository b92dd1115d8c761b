"""The warm interpreter (warm_python.py) runs a command as the real interpreter would: same output, exit status,
directory, environment and argv; a signal sent to the stand-in reaches the program, a death by a signal is passed
back, a stand-in killed with SIGKILL takes its program along, and what it cannot pass on runs the real interpreter."""

import json
import os
import signal
import subprocess
import sys
import time

from tests.jobs import warm_python
from tests.jobs.gpt_train_support import REPO, environment

PROBE = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'marker': os.environ.get('WARM_PROBE'),"
    " 'path0': sys.path[0], 'main': __name__}))\n"
    "print('to stderr', file=sys.stderr)\n"
    "sys.exit(3)\n"
)


def _run(python: str, *args: str, cwd=REPO, **kwargs) -> subprocess.CompletedProcess:
    env = dict(environment(), WARM_PROBE="here")
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, **kwargs)


def test_a_command_gives_what_the_real_interpreter_gives(tmp_path):
    warm = _run(warm_python.interpreter(), "-c", PROBE, "one", "two words", cwd=tmp_path)
    real = _run(sys.executable, "-c", PROBE, "one", "two words", cwd=tmp_path)
    assert (
        (warm.returncode, warm.stdout, warm.stderr)
        == (real.returncode, real.stdout, real.stderr)
        == (
            3,
            real.stdout,
            "to stderr\n",
        )
    )
    assert json.loads(real.stdout) == {
        "argv": ["-c", "one", "two words"],
        "cwd": str(tmp_path),
        "marker": "here",
        "path0": "",
        "main": "__main__",
    }
    module = _run(warm_python.interpreter(), "-u", "-m", "json.tool", "--sort-keys", input='{"b": 1, "a": 2}')
    assert (module.returncode, module.stdout) == (0, '{\n    "a": 2,\n    "b": 1\n}\n'), module.stderr


def test_the_program_runs_warm_and_names_the_stand_in_as_its_interpreter():
    code = "import sys; print('torch' in sys.modules, 'pytorch_lightning' in sys.modules, sys.executable)"
    assert _run(warm_python.interpreter(), "-c", code).stdout.split() == ["True", "True", warm_python.interpreter()]
    # Options the stand-in does not pass on run the real interpreter, fresh.
    assert _run(warm_python.interpreter(), "-W", "ignore", "-c", code).stdout.split() == [
        "False",
        "False",
        sys.executable,
    ]


def test_signals_reach_the_program_and_a_death_by_signal_comes_back(tmp_path):
    assert (
        _run(warm_python.interpreter(), "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode
        == -15
    )
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        f"pathlib.Path({str(ready)!r}).write_text('')\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([warm_python.interpreter(), "-c", code], cwd=REPO, env=environment())
    _wait_for(ready.exists)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 7


def test_a_stand_in_killed_with_sigkill_takes_its_program_along(tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(60)"
    process = subprocess.Popen([warm_python.interpreter(), "-c", code], cwd=REPO, env=environment())
    _wait_for(lambda: pid_file.exists() and pid_file.read_text())
    program = int(pid_file.read_text())
    assert program != process.pid
    process.kill()
    process.wait(timeout=30)
    _wait_for(lambda: not os.path.exists(f"/proc/{program}"))


def _wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
