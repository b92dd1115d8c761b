"""The CLIP trainer on the CPU (conf/training/clip/tiny.yaml, EMA on), as a program on image-caption WebDataset
tars of the generated shapes: the loss falls and the EMA weights are checkpointed; a run killed with SIGKILL and
rerun ends bit-identical to an uninterrupted one (losses after the checkpoint, weights and EMA weights); the
contrastive loss covers the whole global batch (two data-parallel ranks of 8 pairs give the losses of one rank of
16, which comparing only a rank's own pairs would not); TP=2 trains to TP=1's losses."""

import math
import re

import pytest
import torch

from nemo_launcher.jobs.multimodal.shapes import shape_example
from tests.jobs.vision_support import (
    kill_after_checkpoint,
    layers_stacked,
    load_in_process,
    log_dir,
    losses,
    module_names,
    nemo_state,
    run_training,
    weights,
    write_config,
    write_shape_tars,
)

PROGRAM = "nemo_launcher.jobs.clip.train"
RUN = [
    "trainer.max_steps=40",
    "trainer.log_every_n_steps=1",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=20",
    "exp_manager.ema.decay=0.9",
    "model.global_batch_size=16",
    "model.micro_batch_size=16",
    "model.optim.lr=2e-3",
    "model.optim.sched.warmup_steps=5",
    "model.optim.sched.min_lr=1e-3",
]
VALIDATION = [
    "model.data.validation={dataset_path:[${data_dir}/held_out]}",
    "trainer.limit_val_batches=1",
    "trainer.val_check_interval=20",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("clip_data")
    write_shape_tars(directory / "tiny_shapes" / "tarfiles_reorganized", examples=160, per_tar=48)
    write_shape_tars(directory / "held_out", examples=32, per_tar=32, first=1000)
    return directory


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("clip_baseline")
    return work, run_training(write_config(work, data_dir, "clip/tiny", [*RUN, *VALIDATION]), program=(PROGRAM,)).stdout


def test_loss_falls_and_the_ema_weights_are_checkpointed(baseline, tmp_path):
    work, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 41))
    # ln(16): every caption of the batch equally likely. The towers first collapse to it, then learn past it.
    end = sum(curve[s] for s in (38, 39, 40)) / 3
    assert end < math.log(16) - 0.2 and end < 0.85 * sum(curve[s] for s in (1, 2, 3)) / 3, curve
    assert "data: WebDataset shards: 4 tars, 160 image-caption examples; validation 1 tars, 32 examples" in stdout
    assert "validation step=40 val_loss=" in stdout and "  EMA " in stdout
    saved = weights(log_dir(work, "clip_tiny") / "checkpoints" / "step-40", tmp_path)
    trained = {k: v for k, v in saved.items() if not k.startswith("ema.")}
    averaged = {k[len("ema.") :]: v for k, v in saved.items() if k.startswith("ema.")}
    assert averaged.keys() == trained.keys() and "logit_scale" in trained
    # An average of the last steps' weights: near the weights, not equal to them.
    assert all(averaged[k].shape == trained[k].shape for k in trained)
    assert not averaged["vision_projection.weight"].equal(trained["vision_projection.weight"])


def test_finished_run_writes_the_ema_weights_as_the_nemo(baseline, data_dir, tmp_path):
    work, stdout = baseline
    nemo = log_dir(work, "clip_tiny") / "checkpoints" / "nemo_clip.nemo"
    assert re.search(rf"^  \.nemo +{re.escape(str(nemo))}$", stdout, re.M), stdout
    config, state = nemo_state(nemo)
    state = layers_stacked(state)
    saved = module_names(weights(log_dir(work, "clip_tiny") / "checkpoints" / "step-40", tmp_path))
    averaged = {k[len("ema.") :]: v for k, v in saved.items() if k.startswith("ema.")}
    assert state.keys() == averaged.keys()
    for key in averaged:
        assert state[key].equal(averaged[key]), key
    assert config["vision_saved_model"]["family"] == "clip" and config["tokenizer"]["library"] == "byte"
    images = []
    for index in (1000, 1001):
        images.append(tmp_path / f"{index}.png")
        shape_example(index, 0, 64)[0].save(images[-1])
    loaded = load_in_process(nemo, images)
    assert loaded["family"] == "clip" and loaded["size"] == [32, 32] and len(loaded["image"]) == 2
    assert loaded["scale"] == pytest.approx(math.exp(min(float(averaged["logit_scale"]), 4.6052)), rel=1e-6)
    assert all(abs(sum(x * x for x in row) - 1) < 1e-5 for row in loaded["text"]) and len(loaded["text"][0]) == 32


def test_rerun_after_kill_9_is_bit_identical(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = write_config(tmp_path, data_dir, "clip/tiny", [*RUN, *VALIDATION])
    checkpoints = log_dir(tmp_path, "clip_tiny") / "checkpoints"
    kill_after_checkpoint(config, PROGRAM, checkpoints / "step-20", tmp_path / "killed.log", checkpoints / "step-40")
    resumed = run_training(config, program=(PROGRAM,))
    assert f"resuming from {checkpoints / 'step-20'}" in resumed.stdout
    assert losses(resumed.stdout) == {s: v for s, v in losses(reference_out).items() if s >= 21}
    ours = weights(checkpoints / "step-40", tmp_path)
    theirs = weights(log_dir(reference, "clip_tiny") / "checkpoints" / "step-40", tmp_path)
    assert ours.keys() == theirs.keys() and any(k.startswith("ema.") for k in ours)
    for key in ours:
        assert ours[key].equal(theirs[key]), key


SHORT = [*RUN, "trainer.max_steps=4", "model.optim.sched.warmup_steps=1", "exp_manager.ema.enable=false"]


def test_two_data_parallel_ranks_contrast_the_whole_global_batch(data_dir, tmp_path):
    one = run_training(write_config(tmp_path / "dp1", data_dir, "clip/tiny", SHORT), program=(PROGRAM,))
    two = run_training(
        write_config(
            tmp_path / "dp2", data_dir, "clip/tiny", [*SHORT, "trainer.devices=2", "model.micro_batch_size=8"]
        ),
        processes=2,
        program=(PROGRAM,),
    )
    assert "DP=2" in two.stdout
    assert losses(two.stdout) == pytest.approx(losses(one.stdout), abs=2e-4)


def test_tensor_parallel_2_trains_to_the_losses_of_tp_1(data_dir, tmp_path):
    # The byte vocabulary (259) padded to a multiple of 160 x TP is 320 rows for TP 1 and 2 alike, so both draw the
    # same initial embedding.
    short = [*SHORT, "model.make_vocab_size_divisible_by=160", "exp_manager.ema.enable=true"]
    single = run_training(write_config(tmp_path / "tp1", data_dir, "clip/tiny", short), program=(PROGRAM,))
    split = run_training(
        write_config(
            tmp_path / "tp2", data_dir, "clip/tiny", [*short, "trainer.devices=2", "model.tensor_model_parallel_size=2"]
        ),
        processes=2,
        program=(PROGRAM,),
    )
    assert "TP=2 PP=1" in split.stdout and "vocab 320 (padded)" in split.stdout
    expected = losses(single.stdout)
    assert sorted(expected) == [1, 2, 3, 4]
    assert losses(split.stdout) == pytest.approx(expected, abs=2e-4)
    # Both .nemo files are TP=1 (the TP=2 run gathers the EMA shards, vocabulary rows included) and hold nearly the
    # same average.
    _, one = nemo_state(log_dir(tmp_path / "tp1", "clip_tiny") / "checkpoints" / "nemo_clip.nemo")
    _, two = nemo_state(log_dir(tmp_path / "tp2", "clip_tiny") / "checkpoints" / "nemo_clip.nemo")
    assert one.keys() == two.keys() and two["embedding.word_embeddings.weight"].shape[0] == 320
    for key in one:
        assert one[key].shape == two[key].shape and torch.allclose(one[key], two[key], atol=1e-4), key
