"""The GPT training program, run for real on the CPU: python3 -m nemo_launcher.jobs.gpt.train (torchrun for 2).

Each test starts the program as the launcher's scripts do and judges it by what it leaves behind:
progress lines, TensorBoard events, checkpoint folders and the weights in them. One uninterrupted
single-process run (`baseline`) is the reference the others are compared with.
"""

import json
import math
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from nemo_launcher.contract.measured_steps import read_measured_steps
from tests.jobs.gpt_train_support import (
    batch_sizes,
    log_dir,
    losses,
    run_training,
    start_training,
    weights,
    write_config,
)
from tests.jobs.pipeline_support import TINY_VOCAB_DIVISOR, build_data, padded_vocab

# 8 steps saving at 4 and 8. Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by
# x TP: 192 x TP=1 here and 96 x TP=2 below give the same 2112-row table for the tiny BPE's 2,048 tokens (padding
# rows included, as GPT-2's vocabulary always had), so the runs start identical.
RUN = [
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=4",
    f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}",
]
TP2_VOCAB_DIVISOR = f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR // 2}"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("gpt_data")
    build_data(directory)
    return directory


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, data_dir):
    """The uninterrupted single-process run: (work dir, progress output)."""
    work = tmp_path_factory.mktemp("baseline")
    result = run_training(write_config(work, data_dir, RUN))
    return work, result.stdout


def test_loss_falls_and_everything_is_logged(baseline):
    work, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 9))
    assert sum(curve[s] for s in (6, 7, 8)) / 3 < sum(curve[s] for s in (1, 2, 3)) / 3 - 0.15, curve
    assert "validation step=4 val_loss=" in stdout and "test step=8 test_loss=" in stdout
    checkpoints = log_dir(work) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4", "step-8"]
    assert all((checkpoints / name / "COMPLETE").is_file() for name in ("step-4", "step-8"))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir(work)))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"reduced_train_loss", "lr", "tokens_per_sec", "train_step_timing", "val_loss", "test_loss"} <= tags
    assert [e.step for e in events.Scalars("reduced_train_loss")] == list(range(1, 9))
    assert events.Scalars("reduced_train_loss")[0].value == pytest.approx(curve[1], abs=1e-4)

    # The last log point's measured step, which `status` and the AutoConfigurator read without torch.
    measured = read_measured_steps(log_dir(work))
    assert measured["step"] == measured["max_steps"] == 8 and measured["world_size"] == 1, measured
    step_times = [float(t) for t in re.findall(r"step=8/8 .* step_time=([0-9.]+)s", stdout)]
    assert measured["step_time_s"] == pytest.approx(step_times[0], abs=5e-5), (measured, step_times)
    assert measured["peak_memory_gib"] is None and 0 < measured["peak_rss_gib"] < 24, measured


def test_rerun_after_kill_9_ends_with_identical_weights(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = write_config(tmp_path, data_dir, RUN)
    marker = log_dir(tmp_path) / "checkpoints" / "step-4" / "COMPLETE"
    process = start_training(config, tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint at step 4 in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    assert not (log_dir(tmp_path) / "checkpoints" / "step-8" / "COMPLETE").exists(), "killed too late to test a resume"

    resumed = run_training(config)
    assert "resuming from" in resumed.stdout and "step-4" in resumed.stdout
    curve = losses(resumed.stdout)
    assert min(curve) == 5 and curve == {s: v for s, v in losses(reference_out).items() if s >= 5}
    ours = weights(log_dir(tmp_path) / "checkpoints" / "step-8", tmp_path)
    theirs = weights(log_dir(reference) / "checkpoints" / "step-8", tmp_path)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_tensor_parallel_2_matches_and_its_checkpoint_resumes_with_tp_1(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = write_config(
        tmp_path,
        data_dir,
        [*RUN, "trainer.devices=2", "model.tensor_model_parallel_size=2", TP2_VOCAB_DIVISOR],
    )
    tp2 = run_training(config, processes=2)
    assert "TP=2 PP=1" in tp2.stdout
    expected = losses(reference_out)
    assert losses(tp2.stdout) == pytest.approx(expected, abs=2e-4)

    # Continue from the TP=2 checkpoint at step 4 in a single TP=1 process.
    shutil.rmtree(log_dir(tmp_path) / "checkpoints" / "step-8")
    tp1 = run_training(write_config(tmp_path, data_dir, RUN, name="tp1.yaml"))
    assert "resuming from" in tp1.stdout and "TP=1 PP=1" in tp1.stdout
    assert losses(tp1.stdout) == pytest.approx({s: v for s, v in expected.items() if s >= 5}, abs=2e-4)
    ours = weights(log_dir(tmp_path) / "checkpoints" / "step-8", tmp_path)
    theirs = weights(log_dir(reference) / "checkpoints" / "step-8", tmp_path)
    for key in theirs:
        assert ours[key].allclose(theirs[key], atol=1e-4), key


@pytest.mark.parametrize("layers,virtual", [(2, None), (4, 2)], ids=["1f1b", "interleaved"])
def test_pipeline_parallel_2_trains_and_saves(data_dir, tmp_path, layers, virtual):
    # PP=2 runs megatron's 1F1B schedule; with 2 virtual chunks per stage (4 layers, one per chunk) the
    # interleaved one.
    config = write_config(
        tmp_path,
        data_dir,
        [
            *RUN,
            "trainer.max_steps=4",
            "trainer.devices=2",
            f"model.num_layers={layers}",
            "model.pipeline_model_parallel_size=2",
            f"model.virtual_pipeline_model_parallel_size={virtual or 'null'}",
        ],
    )
    result = run_training(config, processes=2)
    assert f"TP=1 PP=2 VPP={virtual or 1}" in result.stdout
    curve = losses(result.stdout)
    # Four steps leave the model near chance: a uniform guess over the output layer's rows costs ln(rows). The band
    # is the one GPT-2's vocabulary had (8.0-11.5 around ln 50,432), moved to the tiny BPE's 2,112 rows (4.8-8.3).
    chance = math.log(padded_vocab(len(json.loads((data_dir / "bpe" / "vocab.json").read_text())), TINY_VOCAB_DIVISOR))
    assert sorted(curve) == [1, 2, 3, 4] and all(chance - 2.83 < v < chance + 0.67 for v in curve.values()), curve
    assert curve[4] < curve[1]
    assert (log_dir(tmp_path) / "checkpoints" / "step-4" / "COMPLETE").is_file()


def test_sigterm_and_max_time_save_a_checkpoint_that_resumes_and_exit_0(data_dir, tmp_path):
    config = write_config(tmp_path, data_dir, [*RUN, "trainer.max_steps=1000"])
    output = tmp_path / "run.log"
    process = start_training(config, output)
    try:
        deadline = time.monotonic() + 240
        while "step=2/1000" not in output.read_text():
            assert process.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, "training did not start in time"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, output.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    text = output.read_text()
    assert "stopping after step=" in text and "signal SIGTERM received" in text
    stopped_at = max(losses(text))
    assert (log_dir(tmp_path) / "checkpoints" / f"step-{stopped_at}" / "COMPLETE").is_file()

    # The same job again continues from that checkpoint; this time trainer.max_time (1 s) stops it the same way after
    # the step during which the second passed (how many steps fit in it depends on the machine): a checkpoint, then
    # exit 0.
    again = run_training(
        write_config(
            tmp_path, data_dir, [*RUN, "trainer.max_steps=1000", "trainer.max_time='00:00:00:01'"], name="again.yaml"
        )
    )
    assert f"resuming from {log_dir(tmp_path) / 'checkpoints' / f'step-{stopped_at}'}" in again.stdout
    steps = sorted(losses(again.stdout))
    assert steps == list(range(stopped_at + 1, steps[-1] + 1)) and steps[-1] < 1000, steps
    assert f"stopping after step={steps[-1]}: trainer.max_time 00:00:00:01 reached" in again.stdout
    assert (log_dir(tmp_path) / "checkpoints" / f"step-{steps[-1]}" / "COMPLETE").is_file()


def test_global_batch_ramps_up(data_dir, tmp_path):
    # From 2 samples (1 microbatch) to 4 (2 microbatches) by steps of 2, over the first 6 samples.
    config = write_config(tmp_path, data_dir, [*RUN, "trainer.max_steps=6", "model.rampup_batch_size=[2,2,6]"])
    result = run_training(config)
    assert batch_sizes(result.stdout) == {1: (2, 1), 2: (2, 1), 3: (2, 1), 4: (4, 2), 5: (4, 2), 6: (4, 2)}
