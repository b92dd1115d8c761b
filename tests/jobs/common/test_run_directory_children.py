"""The stop-signal handler a job installs around its run directory is its own: a forked child (lm-eval's bootstrap
Pool, for one) keeps the default meaning of SIGTERM, so multiprocessing can terminate it."""

import multiprocessing
import os
import signal
import time

from nemo_launcher.jobs.common.run_directory import claimed


def _wait_for_ever(ready):
    ready.set()
    while True:
        time.sleep(0.05)


def test_a_forked_child_dies_on_sigterm_while_the_parent_holds_the_run_directory(tmp_path):
    context = multiprocessing.get_context("fork")
    with claimed(tmp_path, rank=0):
        ready = context.Event()
        child = context.Process(target=_wait_for_ever, args=(ready,))
        child.start()
        assert ready.wait(10)
        os.kill(child.pid, signal.SIGTERM)
        child.join(10)
        assert child.exitcode == -signal.SIGTERM, child.exitcode
        assert (tmp_path / ".nemo_launcher.lock").exists()  # the parent still holds its lock
    assert not (tmp_path / ".nemo_launcher.lock").exists()
