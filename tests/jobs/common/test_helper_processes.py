"""The helper processes a rank starts while saving: a dist_checkpointing save with the trainer core's settings starts
no results Manager (the writers report to a queue in the rank), its writer processes come and go with the save, and
what it wrote loads back."""

import os
import subprocess
import sys

from tests.conftest import require_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout

require_module("megatron.core")

RANK = r"""
import os, queue, sys
import torch
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.strategies import filesystem_async
from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
import megatron.core.dist_checkpointing.strategies.torch  # imported before the CPU shim, as core/parts.py does
from nemo_launcher.jobs.common.helper_processes import collect_write_results_here, stop_signals_held
from nemo_launcher.jobs.common.mcore_cpu import apply_cpu_shim


apply_cpu_shim()

torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
parallel_state.initialize_model_parallel()
weights = torch.arange(12.0).reshape(3, 4)
state = {"w": ShardedTensor.from_rank_offsets("w", weights, replica_id=0)}
with stop_signals_held():
    collect_write_results_here()
    dist_checkpointing.save(state, sys.argv[1], sharded_strategy=get_default_save_sharded_strategy())  # the trainer's
assert isinstance(filesystem_async._results_queue, queue.Queue), type(filesystem_async._results_queue)
with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as handle:
    children = handle.read().split()
for pid in children:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        print("child", handle.read().replace(b"\0", b" ").decode(), flush=True)
template = {"w": ShardedTensor.from_rank_offsets("w", torch.zeros(3, 4), replica_id=0)}
loaded = dist_checkpointing.load(template, sys.argv[1])
print("loaded", bool(torch.equal(loaded["w"], weights)), flush=True)
"""


def test_a_save_starts_no_manager_and_leaves_no_process_behind(tmp_path):
    checkpoint = tmp_path / "step-1"
    checkpoint.mkdir()
    rank = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", RANK, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert rank.returncode == 0, rank.stderr[-3000:]
    lines = rank.stdout.splitlines()
    assert lines[-1] == "loaded True", rank.stdout
    # After the save the rank's one child is Python's resource tracker (stop_signals_held starts it; it exits with
    # the rank): the writers have gone, and megatron's default would have left a spawned Manager beside it.
    children = [line for line in lines if line.startswith("child ")]
    assert len(children) == 1 and "resource_tracker" in children[0], children
