"""The DiT trainer on the CPU (conf/training/dit/tiny.yaml), as a program: the loss falls on the generated Energon
shapes, a run killed with SIGKILL and rerun ends bit-identical to an uninterrupted one (weights, and the losses of
every step after the checkpoint, which differ unless the Energon loader resumes at the sample it stopped before:
restarted from its beginning it would feed the first steps' samples again), and TP=2 trains to TP=1's losses.
"""

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import REPO, command, environment, losses, run_training, weights

PROGRAM = ("nemo_launcher.jobs.dit.train",)
RUN = [
    "trainer.max_steps=12",
    "trainer.log_every_n_steps=1",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=6",
    "model.global_batch_size=16",
    "model.micro_batch_size=8",
    "model.optim.sched.warmup_steps=2",
]
# Mock latents, small enough for two processes on two cores; the cross-attention variant, whose keys and values
# TP splits by head like the self-attention's.
MOCK = [
    "model.data.data_type=mock",
    "model.data.latent_shape=[4,1,8,8]",
    "model.data.seq_length=16",
    "trainer.max_steps=4",
    "model.cross_attention=true",
]


def write_config(work: Path, data_dir: Path, overrides=()) -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / "cfg.yaml",
        "training",
        "dit/tiny",
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[*RUN, *overrides],
    )


def log_dir(work: Path) -> Path:
    return work / "results" / "dit_tiny" / "results"


def start_training_program(config: Path, output: Path) -> subprocess.Popen:
    with open(output, "w") as handle:
        return subprocess.Popen(
            command(config, program=PROGRAM, warm=False),
            cwd=REPO,
            env=environment(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """What data_preparation=dit/tiny_energon writes, smaller: 256 shapes in 4 shards."""
    require_module("megatron.energon")
    from nemo_launcher.jobs.dit.shapes_data import write_shapes

    directory = tmp_path_factory.mktemp("dit_data")
    write_shapes(
        directory / "dit_shapes", image_size=16, text_length=4, text_width=16, seed=0, samples=256, shard_size=64
    )
    return directory


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("dit_baseline")
    return work, run_training(write_config(work, data_dir), program=PROGRAM).stdout


def test_loss_falls_and_checkpoints_and_curves_are_written(baseline):
    work, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 13))
    assert sum(curve[s] for s in (10, 11, 12)) / 3 < 0.6 * sum(curve[s] for s in (1, 2, 3)) / 3, curve
    assert "data: energon " in stdout and "latents [3, 1, 16, 16] (64 tokens), text 4 x 16" in stdout
    assert "  model        DiT adaLN-Zero (pooled text in the conditioning), 64 latent tokens per sample" in stdout
    checkpoints = log_dir(work) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-12", "step-6"]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir(work)))
    events.Reload()
    assert [e.step for e in events.Scalars("reduced_train_loss")] == list(range(1, 13))


def test_rerun_after_kill_9_is_bit_identical_with_the_energon_loader_where_it_stopped(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = write_config(tmp_path, data_dir)
    marker = log_dir(tmp_path) / "checkpoints" / "step-6" / "COMPLETE"
    process = start_training_program(config, tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint at step 6 in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    assert not (log_dir(tmp_path) / "checkpoints" / "step-12" / "COMPLETE").exists(), "killed too late to test a resume"

    resumed = run_training(config, program=PROGRAM)
    assert f"resuming from {log_dir(tmp_path) / 'checkpoints' / 'step-6'}" in resumed.stdout
    curve = losses(resumed.stdout)
    assert curve == {s: v for s, v in losses(reference_out).items() if s >= 7}
    ours = weights(log_dir(tmp_path) / "checkpoints" / "step-12", tmp_path)
    theirs = weights(log_dir(reference) / "checkpoints" / "step-12", tmp_path)
    assert ours.keys() == theirs.keys() and any("adaLN_modulation" in key for key in ours)
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_tensor_parallel_2_trains_to_the_losses_of_tp_1(data_dir, tmp_path):
    single = run_training(write_config(tmp_path / "tp1", data_dir, MOCK), program=PROGRAM)
    assert "data: mock: random latents [4, 1, 8, 8] (16 tokens)" in single.stdout
    split = run_training(
        write_config(tmp_path / "tp2", data_dir, [*MOCK, "trainer.devices=2", "model.tensor_model_parallel_size=2"]),
        processes=2,
        program=PROGRAM,
    )
    assert "TP=2 PP=1" in split.stdout
    expected = losses(single.stdout)
    assert sorted(expected) == [1, 2, 3, 4]
    assert losses(split.stdout) == pytest.approx(expected, abs=2e-4)
