"""ViT fine-tuning (fine_tuning=vit/tiny: 48 px, interpolated positions, a new linear head, SGD) as a program on the
generated shapes, from the .nemo of a training=vit/tiny run: killed and rerun it ends as an uninterrupted run, and at
TP=2 it follows TP=1. What the fine-tuned model scores (evaluation=vit/tiny, and CLIP's zero-shot evaluation) is
checked on the quick starts that run those configs (tests/test_quickstart_vision.py)."""

import pytest

from nemo_launcher.jobs.multimodal.shape_folders import write_shape_folders
from tests.jobs.vision_support import kill_after_checkpoint, losses, nemo_state, run_training


def _config(work, data_dir, stage, choice, overrides=()):
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / f"{stage}.yaml",
        stage,
        choice,
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=list(overrides),
    )


def _run(work, data_dir, stage, choice, program, overrides=()):
    return run_training(_config(work, data_dir, stage, choice, overrides), program=(program,), timeout=900).stdout


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vision_eval_data")
    write_shape_folders(str(directory / "tiny_shapes_folders"), train=480, val=120, size=64, seed=0)
    return directory


@pytest.fixture(scope="module")
def vit_pretrained(data_dir, tmp_path_factory):
    """The work folder of a finished training=vit/tiny run (its .nemo in results/vit_tiny/results/checkpoints)."""
    work = tmp_path_factory.mktemp("vit_pretrained")
    _run(work, data_dir, "training", "vit/tiny", "nemo_launcher.jobs.vit.train", ["trainer.limit_val_batches=0"])
    return work


def test_vit_fine_tuning_killed_and_rerun_ends_as_an_uninterrupted_run(data_dir, vit_pretrained, tmp_path):
    """SGD's momentum buffers are resumed too (megatron-core gives SGD no state layout of its own to load into)."""
    nemo = vit_pretrained / "results" / "vit_tiny" / "results" / "checkpoints" / "nemo_vit_classification.nemo"
    short = [
        "trainer.max_steps=6",
        "trainer.log_every_n_steps=1",
        "trainer.limit_val_batches=0",
        "exp_manager.checkpoint_callback_params.every_n_train_steps=3",
        f"model.restore_from_path={nemo}",
    ]
    whole = _run(tmp_path / "whole", data_dir, "fine_tuning", "vit/tiny", "nemo_launcher.jobs.vit.finetune", short)
    config = _config(tmp_path / "split", data_dir, "fine_tuning", "vit/tiny", short)
    checkpoints = tmp_path / "split" / "results" / "vit_tiny" / "tiny_shapes" / "results" / "checkpoints"
    kill_after_checkpoint(
        config,
        "nemo_launcher.jobs.vit.finetune",
        checkpoints / "step-3",
        tmp_path / "killed.log",
        checkpoints / "step-6",
    )
    resumed = run_training(config, program=("nemo_launcher.jobs.vit.finetune",)).stdout
    assert f"resuming from {checkpoints / 'step-3'}" in resumed
    assert losses(resumed) == {step: loss for step, loss in losses(whole).items() if step > 3}
    ours = nemo_state(checkpoints / "nemo_vit_classification.nemo")[1]
    theirs = nemo_state(
        tmp_path
        / "whole"
        / "results"
        / "vit_tiny"
        / "tiny_shapes"
        / "results"
        / "checkpoints"
        / "nemo_vit_classification.nemo"
    )[1]
    assert ours.keys() == theirs.keys() and all(ours[key].equal(theirs[key]) for key in ours)


def test_vit_fine_tuning_at_tp_2_follows_tp_1(data_dir, vit_pretrained, tmp_path):
    """The TP=1 .nemo is cut for each tensor-parallel rank (saved_models.vision_shard_layout) after the positions are
    resized: both layouts train to the same losses."""
    nemo = vit_pretrained / "results" / "vit_tiny" / "results" / "checkpoints" / "nemo_vit_classification.nemo"
    short = [
        "trainer.max_steps=3",
        "trainer.log_every_n_steps=1",
        "trainer.limit_val_batches=0",
        "model.optim.sched.warmup_steps=1",
        f"model.restore_from_path={nemo}",
    ]
    single = _run(tmp_path / "tp1", data_dir, "fine_tuning", "vit/tiny", "nemo_launcher.jobs.vit.finetune", short)
    config = _config(
        tmp_path / "tp2",
        data_dir,
        "fine_tuning",
        "vit/tiny",
        [*short, "trainer.devices=2", "model.tensor_model_parallel_size=2"],
    )
    split = run_training(config, processes=2, program=("nemo_launcher.jobs.vit.finetune",)).stdout
    assert "TP=2 PP=1" in split and sorted(losses(single)) == [1, 2, 3]
    assert losses(split) == pytest.approx(losses(single), abs=2e-4)
