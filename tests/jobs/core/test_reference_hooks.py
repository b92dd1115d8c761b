"""The reference's run-time keys, run for real on the CPU: the nsys wrapper, git_log.txt, model.gc_interval and
checkpoint pruning by validation loss.

One run in two attempts on two processes serves every test. The first trains steps 1-4 at the tiny config's
learning rate; the second resumes it to step 8 at a learning rate far too high, so its validation losses rise
and the best checkpoint is an old one (step 4), not the newest: the pruning rule then has something to choose.
Both attempts start through the profiling wrapper as the launcher renders it (`profiled_command`), with a fake
`nsys` first on PATH that records its arguments and runs the wrapped command.
"""

import re
import subprocess
from pathlib import Path

import pytest

from tests.jobs import warm_python
from tests.jobs.gpt_train_support import MODULE, REPO, command, environment, log_dir, losses, write_config

COMMON = [
    "trainer.devices=2",
    "trainer.val_check_interval=2",
    "trainer.limit_test_batches=0",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
    "exp_manager.checkpoint_callback_params.save_top_k=1",
    "exp_manager.checkpoint_callback_params.monitor=val_loss",
    "model.gc_interval=3",
    "model.nsys_profile.enabled=true",
    "model.nsys_profile.ranks=[1]",
    "model.nsys_profile.trace=[nvtx,osrt]",
]
FIRST = [*COMMON, "trainer.max_steps=4"]
SECOND = [*COMMON, "trainer.max_steps=8", "model.optim.lr=1.0", "model.optim.sched.min_lr=1.0"]

# Nsight Systems' stand-in: `nsys profile <--options> <command...>` records its arguments (one per line) under the
# torchrun rank that started it, then becomes the command.
FAKE_NSYS = """#!/bin/sh
printf '%s\\n' "$@" > "$NSYS_CALLS/rank$RANK.args"
shift
while [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""


def _attempt(work: Path, config: Path, calls: Path) -> subprocess.CompletedProcess:
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.contract.schemas.gpu_training import profiled_command
    from nemo_launcher.jobs.common.config import load_resolved_config

    cfg = TrainingConfig.from_dict(load_resolved_config(config))
    module, wrapper = profiled_command(MODULE, (), cfg.model.nsys_profile, cfg.exp_manager.explicit_log_dir)
    env = environment()
    env["PATH"] = f"{work / 'bin'}:{env['PATH']}"
    env["NSYS_CALLS"] = str(calls)
    result = subprocess.run(
        command(config, 2, (module, *wrapper)), cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
    return result


@pytest.fixture(scope="module")
def attempts(tmp_path_factory, sample_data_dir):
    """(work dir, first attempt's stdout, second attempt's stdout, nsys calls folder of the second attempt)."""
    work = tmp_path_factory.mktemp("reference_hooks")
    (work / "bin").mkdir()
    fake = work / "bin" / "nsys"
    fake.write_text(FAKE_NSYS)
    fake.chmod(0o755)
    outputs = []
    for name, overrides in (("first", FIRST), ("second", SECOND)):
        calls = work / f"nsys_calls_{name}"
        calls.mkdir()
        config = write_config(work, sample_data_dir, overrides, name=f"{name}.yaml")
        outputs.append((_attempt(work, config, calls).stdout, calls, config))
    return work, outputs


def _validation_losses(stdout: str) -> dict:
    return {
        int(step): float(loss) for step, loss in re.findall(r"^validation step=(\d+) val_loss=([0-9.]+)", stdout, re.M)
    }


def test_nsys_wraps_the_configured_ranks_only_and_training_finishes(attempts):
    work, outputs = attempts
    for _stdout, calls, config in outputs:
        assert sorted(p.name for p in calls.iterdir()) == ["rank1.args"]  # rank 0 ran the program directly
        args = (calls / "rank1.args").read_text().splitlines()
        nsys_dir = log_dir(work) / "nsys"
        assert args[:8] == [
            "profile",
            "--sample=none",
            "--trace=nvtx,osrt",
            f"--output={nsys_dir}/rank1",
            "--force-overwrite=true",
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            warm_python.interpreter(),  # the rank's own interpreter (command() names the warm one)
        ]
        assert args[8:] == ["-u", "-m", MODULE, "--config", str(config)]
        assert nsys_dir.is_dir()  # the wrapper prepares nsys's output folder on the profiled rank
    assert sorted(losses(outputs[0][0])) == [1, 2, 3, 4]
    assert sorted(losses(outputs[1][0])) == [5, 6, 7, 8]
    assert "TP=1 PP=1 VPP=1 DP=2" in outputs[0][0]


def test_git_log_records_the_code_versions(attempts):
    from importlib import metadata

    work, _ = attempts
    record = (work / "results" / "gpt3_tiny" / "git_log.txt").read_text().splitlines()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert any(line.startswith(f"commit: {head}") for line in record), record
    assert f"torch: {metadata.version('torch')}" in record
    assert f"megatron-core: {metadata.version('megatron-core')}" in record
    assert "recent commits:" in record


def test_gc_runs_at_the_configured_steps_only(attempts):
    _, outputs = attempts
    # Every third global step, counted over the run: the resumed attempt collects after step 6, not after its third.
    assert (
        "gc: model.gc_interval=3: collected in the training loop after steps 3 (1 in all); automatic collection "
        "off, collections started elsewhere: 0"
    ) in outputs[0][0]
    assert (
        "gc: model.gc_interval=3: collected in the training loop after steps 6 (1 in all); automatic collection "
        "off, collections started elsewhere: 0"
    ) in outputs[1][0]


def test_pruning_by_val_loss_keeps_the_lowest_and_the_newest(attempts):
    import json

    work, outputs = attempts
    validated = {**_validation_losses(outputs[0][0]), **_validation_losses(outputs[1][0])}
    assert sorted(validated) == [2, 4, 6, 8]
    best = min(validated, key=validated.get)
    assert best != 8, f"the second attempt's losses should rise, making an older checkpoint the best: {validated}"
    checkpoints = log_dir(work) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted({f"step-{best}", "step-8"})
    for step in {best, 8}:
        # Each checkpoint carries the loss of the validation of its own weights (run at its step, after the save).
        recorded = json.loads((checkpoints / f"step-{step}" / "COMPLETE").read_text())["val_loss"]
        assert recorded == pytest.approx(validated[step], abs=1e-4)


def test_gc_hook_counts_collections_started_elsewhere():
    import gc
    import types

    from nemo_launcher.jobs.core.step_hooks import GarbageCollection

    lines = []
    hook = GarbageCollection(2, lines.append)
    was_enabled = gc.isenabled()
    hook.on_train_start(None, None)
    try:
        assert not gc.isenabled()
        for step in range(1, 6):
            hook.on_train_batch_end(types.SimpleNamespace(global_step=step), None, None, None, 0)
        gc.collect()  # someone else's collection
        hook.on_train_end(None, None)
    finally:
        hook.teardown(None, None, "fit")
    assert gc.isenabled() == was_enabled and hook.collected_after == [2, 4]
    assert lines == [
        "gc: model.gc_interval=2: collected in the training loop after steps 2, 4 (2 in all); automatic "
        "collection off, collections started elsewhere: 1"
    ]
