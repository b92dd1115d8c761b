"""Continued pretraining: `training.model.restore_from_path` starts a new run from the weights of a checkpoint folder
(what conversion_hf2nemo writes for an imported Hugging Face model, or another run's step-<N>), with a fresh
optimizer and step count. Judged by the weights: a run started from a first run's step-4 with a learning rate too
small to move them saves, at its own step 1, the weights of that step-4 (and not the random ones it would otherwise
start from)."""

import pytest

from tests.jobs.gpt_train_support import log_dir, losses, run_training, weights, write_config
from tests.jobs.pipeline_support import TINY_VOCAB_DIVISOR, build_data

COMMON = [f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}", "trainer.limit_val_batches=0"]
# Adam moves every weight by about the learning rate per step, whatever its gradient: 1e-9 leaves them as loaded.
STILL = [
    "model.optim.lr=1.0e-9",
    "model.optim.sched.min_lr=0.0",
    "model.optim.sched.warmup_steps=0",
    "trainer.max_steps=1",
]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("continued_data")
    build_data(data_dir)
    work = tmp_path_factory.mktemp("first")
    run_training(
        write_config(
            work,
            data_dir,
            [*COMMON, "trainer.max_steps=4", "exp_manager.checkpoint_callback_params.every_n_train_steps=4"],
        )
    )
    return data_dir, log_dir(work) / "checkpoints" / "step-4"


def _one_still_step(data_dir, work, *extra):
    result = run_training(write_config(work, data_dir, [*COMMON, *STILL, *extra]))
    return result.stdout, log_dir(work) / "checkpoints" / "step-1"


def test_a_new_run_starts_from_the_named_checkpoints_weights(first_run, tmp_path):
    data_dir, step4 = first_run
    stdout, step1 = _one_still_step(data_dir, tmp_path / "continued", f"model.restore_from_path={step4}")
    assert sorted(losses(stdout)) == [1], "a new run: its own step count, from 1"
    started, loaded = weights(step1, tmp_path), weights(step4, tmp_path)
    assert started.keys() == loaded.keys()
    for name, tensor in loaded.items():
        assert (started[name] - tensor).abs().max() < 1e-6, name

    # Without the key the same run starts from its random initialisation, far from the trained weights.
    _, fresh = _one_still_step(data_dir, tmp_path / "fresh")
    fresh_weights = weights(fresh, tmp_path)
    assert any((fresh_weights[name] - tensor).abs().max() > 1e-4 for name, tensor in loaded.items())
