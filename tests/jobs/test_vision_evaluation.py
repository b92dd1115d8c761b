"""The vision downstream stages as programs on the generated shapes (12 classes, chance top-1 8.3%), each reading
what the stage before wrote at its default path:
- training=vit/tiny -> fine_tuning=vit/tiny (48 px, interpolated positions, a new linear head, SGD) ->
  evaluation=vit/tiny: the evaluation stage's own top-1 on the held-out images is far above chance;
- training=clip/tiny -> evaluation=clip/tiny: CLIP's zero-shot top-1 from class-name prompts, far above chance.
The fine-tuned .nemo holds the fine-tuned architecture (linear head, 6 x 6 positions) that load_vision_model reads."""
import json

import pytest

from nemo_launcher.jobs.vision.shape_folders import write_shape_folders

from .vision_support import nemo_state, run_training, write_shape_tars

CHANCE = 100 / 12


def _config(work, data_dir, stage, choice, overrides=()):
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(work / f"{stage}.yaml", stage, choice, data_dir=data_dir,
                              base_results_dir=work / "results", overrides=list(overrides))


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


def test_vit_fine_tuned_at_a_higher_resolution_scores_far_above_chance(data_dir, tmp_path):
    work = tmp_path
    _run(work, data_dir, "training", "vit/tiny", "nemo_launcher.jobs.vit.train", ["trainer.limit_val_batches=0"])
    tuned = _run(work, data_dir, "fine_tuning", "vit/tiny", "nemo_launcher.jobs.vit.finetune")
    assert "positions 4x4 -> 6x6, head new linear head of 12 classes (zeros)" in tuned
    nemo = work / "results" / "vit_tiny" / "tiny_shapes" / "results" / "checkpoints" / "nemo_vit_classification.nemo"
    config, state = nemo_state(nemo)
    assert (config["img_h"], config["head_type"], state["tower.position_embeddings.weight"].shape[0]) == (48, "linear", 37)
    assert "head_hidden.weight" not in state
    stdout = _run(work, data_dir, "evaluation", "vit/tiny", "nemo_launcher.jobs.vit.evaluate")
    scores = _scores(stdout, work, "vit_tiny/eval_tiny_shapes_val_vit_tiny", "tiny_shapes_val")
    assert scores["images"] == 120 and scores["classes"] == 12 and scores["chance_top1"] == pytest.approx(CHANCE)
    assert scores["model"] == str(nemo)
    print(f"ViT fine-tuned top-1 {scores['top1']:.1f}% top-5 {scores['top5']:.1f}% (chance {CHANCE:.1f}%)")
    assert scores["top1"] >= 3 * CHANCE and scores["top5"] >= scores["top1"]


def test_clip_zero_shot_from_class_name_prompts_scores_far_above_chance(data_dir, tmp_path):
    work = tmp_path
    _run(work, data_dir, "training", "clip/tiny", "nemo_launcher.jobs.clip.train")
    stdout = _run(work, data_dir, "evaluation", "clip/tiny", "nemo_launcher.jobs.clip.zeroshot")
    scores = _scores(stdout, work, "clip_tiny/eval_tiny_shapes_zeroshot_clip_tiny", "tiny_shapes_zeroshot")
    assert scores["images"] == 120 and scores["classes"] == 12
    assert scores["model"] == str(work / "results" / "clip_tiny" / "results" / "checkpoints" / "nemo_clip.nemo")
    print(f"CLIP zero-shot top-1 {scores['top1']:.1f}% (chance {CHANCE:.1f}%)")
    assert scores["top1"] >= 3 * CHANCE
