"""The vision downstream stages as programs on the generated shapes (12 classes, chance top-1 8.3%), each reading
what the stage before wrote at its default path:
- training=vit/tiny -> fine_tuning=vit/tiny (48 px, interpolated positions, a new linear head, SGD) ->
  evaluation=vit/tiny: the evaluation stage's own top-1 on the held-out images is far above chance;
- training=clip/tiny -> evaluation=clip/tiny: CLIP's zero-shot top-1 from class-name prompts, far above chance.
The fine-tuned .nemo holds the fine-tuned architecture (linear head, 6 x 6 positions) that load_vision_model reads."""

import json

import pytest

from nemo_launcher.jobs.multimodal.shape_folders import write_shape_folders
from tests.jobs.vision_support import kill_after_checkpoint, losses, nemo_state, run_training, write_shape_tars

CHANCE = 100 / 12


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
    write_shape_tars(directory / "tiny_shapes" / "tarfiles_reorganized", examples=480, per_tar=120)
    return directory


def _scores(stdout: str, work, run_dir: str, task: str) -> dict:
    results = work / "results" / run_dir / "results" / f"{task}_results.json"
    scores = json.loads(results.read_text())
    assert f"{task:<20}" in stdout and f"{scores['top1']:>10.2f}" in stdout  # the printed table
    return scores


@pytest.fixture(scope="module")
def vit_pretrained(data_dir, tmp_path_factory):
    """The work folder of a finished training=vit/tiny run (its .nemo in results/vit_tiny/results/checkpoints)."""
    work = tmp_path_factory.mktemp("vit_pretrained")
    _run(work, data_dir, "training", "vit/tiny", "nemo_launcher.jobs.vit.train", ["trainer.limit_val_batches=0"])
    return work


def test_vit_fine_tuned_at_a_higher_resolution_scores_far_above_chance(data_dir, vit_pretrained):
    work = vit_pretrained
    tuned = _run(work, data_dir, "fine_tuning", "vit/tiny", "nemo_launcher.jobs.vit.finetune")
    assert "positions 4x4 -> 6x6, head new linear head of 12 classes (zeros)" in tuned
    nemo = work / "results" / "vit_tiny" / "tiny_shapes" / "results" / "checkpoints" / "nemo_vit_classification.nemo"
    config, state = nemo_state(nemo)
    assert (config["img_h"], config["head_type"], state["tower.position_embeddings.weight"].shape[0]) == (
        48,
        "linear",
        37,
    )
    assert "head_hidden.weight" not in state
    stdout = _run(work, data_dir, "evaluation", "vit/tiny", "nemo_launcher.jobs.vit.evaluate")
    scores = _scores(stdout, work, "vit_tiny/eval_tiny_shapes_val_vit_tiny", "tiny_shapes_val")
    assert scores["images"] == 120 and scores["classes"] == 12 and scores["chance_top1"] == pytest.approx(CHANCE)
    assert scores["model"] == str(nemo)
    print(f"ViT fine-tuned top-1 {scores['top1']:.1f}% top-5 {scores['top5']:.1f}% (chance {CHANCE:.1f}%)")
    assert scores["top1"] >= 3 * CHANCE and scores["top5"] >= scores["top1"]


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


def test_clip_zero_shot_from_class_name_prompts_scores_far_above_chance(data_dir, tmp_path):
    work = tmp_path
    _run(work, data_dir, "training", "clip/tiny", "nemo_launcher.jobs.clip.train")
    stdout = _run(work, data_dir, "evaluation", "clip/tiny", "nemo_launcher.jobs.clip.zeroshot")
    scores = _scores(stdout, work, "clip_tiny/eval_tiny_shapes_zeroshot_clip_tiny", "tiny_shapes_zeroshot")
    assert scores["images"] == 120 and scores["classes"] == 12
    assert scores["model"] == str(work / "results" / "clip_tiny" / "results" / "checkpoints" / "nemo_clip.nemo")
    print(f"CLIP zero-shot top-1 {scores['top1']:.1f}% (chance {CHANCE:.1f}%)")
    assert scores["top1"] >= 3 * CHANCE


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
