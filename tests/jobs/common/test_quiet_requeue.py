"""A requeue's SIGUSR1 leaves no warning in the job's log: Python's multiprocessing resource tracker, a child of the
rank that gets every signal sent to the job step, survives it (helper_processes.start_resource_tracker).

Slurm's time-limit warning (--signal=USR1@N) and `scancel --signal=USR1` signal every process of the step; here the
training runs in a process group of its own and the test signals the whole group, as Slurm would."""

import os
import re
import signal
import subprocess
import sys
import time

from tests.jobs.gpt_train_support import REPO, command, environment, write_config

# What Python's resource tracker says when it was killed (its parent relaunches it) or found leaks at its end, and
# the location line of such a warning (the test's own tmp_path holds "resource_tracker" with neither '.py' nor ':').
TRACKER_WARNING = re.compile(r"resource_tracker(\.py|:)|died unexpectedly|leaked", re.IGNORECASE)


def test_the_resource_tracker_outlives_sigusr1_and_the_stopped_attempt_logs_no_warning(sample_data_dir, tmp_path):
    # A save comes before the signal, as on a cluster, where the time-limit warning comes hours after the first one:
    # a save starts the tracker where the job did not start it first, so there is a tracker for the signal to kill.
    config = write_config(
        tmp_path,
        sample_data_dir,
        ["trainer.max_steps=1000", "exp_manager.checkpoint_callback_params.every_n_train_steps=2"],
    )
    output = tmp_path / "attempt0.log"
    with open(output, "w") as handle:
        # A fresh process (not the warm interpreter's fork) leading its own process group, as srun's step does.
        process = subprocess.Popen(
            command(config, warm=False),
            cwd=REPO,
            env=environment(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while "checkpoint step=2 saved" not in output.read_text():
            assert process.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGUSR1)
        assert process.wait(timeout=120) == 0, output.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = output.read_text()
    assert "signal SIGUSR1 received; the next attempt resumes from its checkpoint" in text, text[-3000:]
    assert [line for line in text.splitlines() if TRACKER_WARNING.search(line)] == []


# A caller that holds SIGTERM blocked (as stop_signals_held does) starts its tracker, then signals the tracker alone.
TRACKER_OF_ITS_OWN = """
import os, signal, time
from multiprocessing import resource_tracker
from nemo_launcher.jobs.common.helper_processes import start_resource_tracker

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
start_resource_tracker()
print("SIGTERM still blocked here:", signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
tracker = resource_tracker._resource_tracker._pid
os.kill(tracker, signal.SIGUSR1)
time.sleep(0.2)
print("tracker after SIGUSR1:", "alive" if os.waitpid(tracker, os.WNOHANG) == (0, 0) else "dead", flush=True)
"""


def test_a_tracker_started_here_outlives_sigusr1_and_the_caller_keeps_its_signal_mask():
    # In a process of its own: pytest's tracker (if it has one) started without the fix and is shared by its tests.
    probe = subprocess.run(
        [sys.executable, "-c", TRACKER_OF_ITS_OWN], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == ["SIGTERM still blocked here: True", "tracker after SIGUSR1: alive"], probe
