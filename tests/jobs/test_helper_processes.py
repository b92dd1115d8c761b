"""The helper processes a rank starts while saving: dist_checkpointing's results Manager is started by us, ignores
Slurm's stop signals (started inside stop_signals_held) and still dies when its rank is killed with SIGKILL,
instead of living on as an orphan; megatron's save uses that same Manager."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import require_module

require_module("megatron.core")

RANK = r"""
import os, signal, sys, time
from nemo_launcher.jobs.common.helper_processes import bind_checkpoint_manager, stop_signals_held
from megatron.core.dist_checkpointing.strategies import filesystem_async
with stop_signals_held():
    bind_checkpoint_manager()
queue = filesystem_async._results_queue
assert filesystem_async._get_write_results_queue() is queue  # megatron's save reuses it
queue.put("ok"); assert queue.get() == "ok"
bind_checkpoint_manager()  # a later save's call keeps the same one
assert filesystem_async._results_queue is queue
print(queue._manager._process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_checkpoint_manager_ignores_stop_signals_and_dies_with_its_rank():
    rank = subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        manager = int(rank.stdout.readline())
        os.kill(manager, signal.SIGTERM)  # scancel's signal: a save in flight must keep its Manager
        time.sleep(0.5)
        assert _alive(manager)
        rank.kill()
        rank.wait()
        deadline = time.monotonic() + 10
        while _alive(manager) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(manager), "the Manager outlived its rank"
    finally:
        rank.kill()
