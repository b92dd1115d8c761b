"""The README's vision quick starts, end to end on this CPU: python3 main.py --config-name=quickstart_vit (class
folders, training, fine-tuning, evaluation, framework inference, export) and --config-name=quickstart_clip (the
WebDataset pipeline, training, zero-shot evaluation, similarity, export). Each runs once; every check of what it
shows a user is made here: the stages' results, accuracies well above chance measured by the evaluation stage, the
ONNX check, and output and job logs free of Python warnings. They are also the tests of the evaluation programs'
results on the configs they run (vit/tiny fine-tuned at 48 px, clip/tiny zero-shot): the printed table, the scored
images and classes, the model read at its default path, and the fine-tuned .nemo's architecture."""

import json

from tests.jobs.vision_support import nemo_state
from tests.test_quickstart import _PYTHON_WARNING, _run_quickstart

CHANCE = 100 / 12  # 12 classes of shapes


def _scores(run, results_dir, model):
    """The evaluation stage's results (its table printed in its job log), for `model` and the 120 held-out images
    of the 12 classes."""
    (path,) = results_dir.glob("*_results.json")
    scores = json.loads(path.read_text())
    (log,) = results_dir.parent.glob("log-*.out")
    task = path.name.removesuffix("_results.json")
    assert f"{task:<20}" in log.read_text() and f"{scores['top1']:>10.2f}" in log.read_text()  # the table
    assert scores["images"] == 120 and scores["classes"] == 12 and abs(scores["chance_top1"] - CHANCE) < 1e-9
    assert scores["model"] == str(model)
    return scores


def _quiet(run, results):
    for where, text in [("output", run.stdout + run.stderr)] + [(p, p.read_text()) for p in results.rglob("log-*.out")]:
        noise = [line for line in text.splitlines() if _PYTHON_WARNING.search(line)]
        assert not noise, f"{where} shows warnings:\n" + "\n".join(noise[:20])


def test_quickstart_vit_runs_every_stage(tmp_path):
    run, results, data = _run_quickstart("quickstart_vit", tmp_path)
    run_dir = results / "vit_tiny"
    for stage, folder in (
        ("training", run_dir),
        ("fine_tuning", run_dir / "tiny_shapes"),
        ("fw_inference", run_dir / "fw_inference_imagenet1k"),
        ("export", run_dir / "export_vit"),
    ):
        assert f"{stage}: {folder}" in run.stdout
    tuned = run_dir / "tiny_shapes"
    (tuning_log,) = tuned.glob("log-*.out")
    assert "positions 4x4 -> 6x6, head new linear head of 12 classes (zeros)" in tuning_log.read_text()
    nemo = tuned / "results" / "checkpoints" / "nemo_vit_classification.nemo"
    config, state = nemo_state(nemo)  # the fine-tuned architecture: 48 px, 6 x 6 positions + class token, linear head
    assert (config["img_h"], config["head_type"], state["tower.position_embeddings.weight"].shape[0]) == (
        48,
        "linear",
        37,
    )
    assert "head_hidden.weight" not in state
    scores = _scores(run, run_dir / "eval_tiny_shapes_val_vit_tiny" / "results", nemo)
    top1 = scores["top1"]
    assert top1 >= 3 * CHANCE and scores["top5"] >= top1, f"fine-tuned ViT top-1 {top1}% (chance {CHANCE:.1f}%)"
    predictions = json.loads((run_dir / "fw_inference_imagenet1k" / "predictions.json").read_text())
    assert predictions["images"] == 120 and predictions["folder_agreement"]["images"] == 120
    report = json.loads((run_dir / "export_vit" / "export_report.json").read_text())
    assert report["max_abs_difference"]["vit"] <= 1e-4
    assert (run_dir / "export_vit" / "model_repo" / "vit_trt" / "config.pbtxt").is_file()
    _quiet(run, results)


def test_quickstart_clip_runs_every_stage(tmp_path):
    run, results, data = _run_quickstart("quickstart_clip", tmp_path)
    run_dir = results / "clip_tiny"
    assert list((data / "tiny_shapes").rglob("wdinfo.pkl")), "the WebDataset pipeline ran to its last step"
    nemo = run_dir / "results" / "checkpoints" / "nemo_clip.nemo"
    top1 = _scores(run, run_dir / "eval_tiny_shapes_zeroshot_clip_tiny" / "results", nemo)["top1"]
    assert top1 >= 3 * CHANCE, f"zero-shot CLIP top-1 {top1}% (chance {CHANCE:.1f}%)"
    similarity = json.loads((run_dir / "fw_inference_clip_similarity" / "similarity.json").read_text())
    assert abs(sum(row["probability"] for row in similarity["texts"]) - 1) < 1e-6
    assert similarity["best"].startswith("a red"), similarity  # a held-out red circle: its colour at least
    report = json.loads((run_dir / "export_clip" / "export_report.json").read_text())
    assert max(report["max_abs_difference"].values()) <= 1e-4
    assert sorted(p.name for p in (run_dir / "export_clip" / "model_repo").iterdir()) == ["clip_trt", "clip_vision_trt"]
    _quiet(run, results)
