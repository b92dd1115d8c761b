"""The ViT trainer on the CPU (conf/training/vit/tiny.yaml), as a program on the generated shapes in ImageNet's
class-folder layout: the loss falls and validation reports top-1 accuracy, a run killed with SIGKILL and rerun
ends bit-identical to an uninterrupted one (weights, and the losses of every step after the checkpoint, which
differ unless the rerun reads the images, and draws the crops, the uninterrupted run read next), and TP=2 trains
to TP=1's losses."""

import re

import pytest

from nemo_launcher.jobs.multimodal.shape_folders import write_shape_folders
from tests.jobs.vision_support import (
    kill_after_checkpoint,
    layers_stacked,
    load_in_process,
    log_dir,
    losses,
    nemo_state,
    run_training,
    weights,
    write_config,
)

PROGRAM = "nemo_launcher.jobs.vit.train"
RUN = [
    "trainer.max_steps=24",
    "trainer.log_every_n_steps=1",
    "trainer.val_check_interval=12",
    "trainer.limit_val_batches=1",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=12",
    "model.global_batch_size=16",
    "model.micro_batch_size=8",
    "model.optim.lr=1e-2",
    "model.optim.sched.warmup_steps=1",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vit_data")
    write_shape_folders(str(directory / "tiny_shapes_folders"), train=192, val=48, size=64, seed=0)
    return directory


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("vit_baseline")
    return work, run_training(write_config(work, data_dir, "vit/tiny", RUN), program=(PROGRAM,)).stdout


def test_loss_falls_and_validation_reports_top1(baseline):
    work, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 25))
    assert sum(curve[s] for s in (22, 23, 24)) / 3 < 0.85 * sum(curve[s] for s in (1, 2, 3)) / 3, curve
    assert "data: class folders " in stdout and "(192 images, 12 classes), validation " in stdout
    assert re.search(r"^validation step=24 val_loss=[0-9.]+ top1_accuracy=[0-9.]+$", stdout, re.M), stdout
    assert sorted(p.name for p in (log_dir(work, "vit_tiny") / "checkpoints").iterdir()) == [
        "nemo_vit_classification.nemo",
        "step-12",
        "step-24",
    ]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir(work, "vit_tiny")))
    events.Reload()
    assert [e.step for e in events.Scalars("reduced_train_loss")] == list(range(1, 25))
    assert [e.step for e in events.Scalars("val_top1_accuracy")] == [12, 24]


def test_finished_run_writes_the_nemo_that_load_vision_model_reads(baseline, data_dir, tmp_path):
    work, stdout = baseline
    nemo = log_dir(work, "vit_tiny") / "checkpoints" / "nemo_vit_classification.nemo"
    assert re.search(rf"^  \.nemo +{re.escape(str(nemo))}$", stdout, re.M), stdout
    config, state = nemo_state(nemo)
    state = layers_stacked(state)
    final = weights(log_dir(work, "vit_tiny") / "checkpoints" / "step-24", tmp_path)
    assert state.keys() == final.keys()
    for key in final:
        assert state[key].equal(final[key]), key
    classes = sorted(p.name for p in (data_dir / "tiny_shapes_folders" / "train").iterdir())
    assert config["vision_saved_model"] == {"family": "vit", "precision": "fp32", "class_names": classes}
    images = sorted((data_dir / "tiny_shapes_folders" / "val").glob("*/*.png"))[:6]
    loaded = load_in_process(nemo, images)
    assert loaded["family"] == "vit" and loaded["size"] == [32, 32] and loaded["classes"] == classes
    assert len(loaded["logits"]) == 6 and all(len(row) == 12 for row in loaded["logits"])


def test_conversion_of_an_intermediate_checkpoint_writes_its_weights_and_class_names(baseline, data_dir, tmp_path):
    from nemo_launcher.launch.stage_config import write_stage_config

    work, _ = baseline
    config = write_stage_config(
        tmp_path / "conv.yaml",
        "conversion",
        "vit/convert_vit",
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[
            "run.model_train_name=vit_tiny",
            f"model.hparams_file={work / 'cfg.yaml'}",
            "model.checkpoint_name=step-12",
            "run.convert_name=convert_step12",
        ],
    )
    result = run_training(config, program=("nemo_launcher.jobs.vision.convert",))
    nemo = work / "results" / "vit_tiny" / "convert_step12" / "results" / "nemo_vit.nemo"
    assert str(nemo) in result.stdout and "hf.mode: off" in result.stdout
    saved, state = nemo_state(nemo)
    final = weights(log_dir(work, "vit_tiny") / "checkpoints" / "step-12", tmp_path)
    state = layers_stacked(state)
    assert state.keys() == final.keys()
    for key in final:
        assert state[key].equal(final[key]), key
    classes = sorted(p.name for p in (data_dir / "tiny_shapes_folders" / "train").iterdir())
    assert saved["vision_saved_model"]["class_names"] == classes


def test_rerun_after_kill_9_is_bit_identical(baseline, data_dir, tmp_path):
    reference, reference_out = baseline
    config = write_config(tmp_path, data_dir, "vit/tiny", RUN)
    checkpoints = log_dir(tmp_path, "vit_tiny") / "checkpoints"
    kill_after_checkpoint(config, PROGRAM, checkpoints / "step-12", tmp_path / "killed.log", checkpoints / "step-24")
    resumed = run_training(config, program=(PROGRAM,))
    assert f"resuming from {checkpoints / 'step-12'}" in resumed.stdout
    assert losses(resumed.stdout) == {s: v for s, v in losses(reference_out).items() if s >= 13}
    ours = weights(checkpoints / "step-24", tmp_path)
    theirs = weights(log_dir(reference, "vit_tiny") / "checkpoints" / "step-24", tmp_path)
    assert ours.keys() == theirs.keys() and any("head_out" in key for key in ours)
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_tensor_parallel_2_trains_to_the_losses_of_tp_1(data_dir, tmp_path):
    short = [*RUN, "trainer.max_steps=4", "trainer.limit_val_batches=0"]
    single = run_training(write_config(tmp_path / "tp1", data_dir, "vit/tiny", short), program=(PROGRAM,))
    split = run_training(
        write_config(
            tmp_path / "tp2", data_dir, "vit/tiny", [*short, "trainer.devices=2", "model.tensor_model_parallel_size=2"]
        ),
        processes=2,
        program=(PROGRAM,),
    )
    assert "TP=2 PP=1" in split.stdout
    expected = losses(single.stdout)
    assert sorted(expected) == [1, 2, 3, 4]
    assert losses(split.stdout) == pytest.approx(expected, abs=2e-4)
    # The TP=2 run gathers its shards into the TP=1 .nemo: the weights of its own last checkpoint, whole.
    state = layers_stacked(
        nemo_state(log_dir(tmp_path / "tp2", "vit_tiny") / "checkpoints" / "nemo_vit_classification.nemo")[1]
    )
    final = weights(log_dir(tmp_path / "tp2", "vit_tiny") / "checkpoints" / "step-4", tmp_path)
    assert state.keys() == final.keys() and any("linear_qkv" in key for key in final)
    for key in final:
        assert state[key].equal(final[key]), key
