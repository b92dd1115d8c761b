"""fw_inference=vit/imagenet1k and clip/clip_similarity: the job programs, run as the launcher runs them, report what
the saved model computes (checked against vision/saved_models.py in this process), write their JSON, print their
table, skip unreadable files, and refuse a model of the other family with one Error line."""

import json
import subprocess

import pytest

from tests.conftest import require_module
from tests.jobs import warm_python
from tests.jobs.gpt_train_support import REPO, environment

from .vision_models import random_vision_nemo

torch = require_module("torch")

TEXTS = ["a red circle", "a blue square", "a green triangle", "a yellow cross"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from nemo_launcher.jobs.multimodal.shape_folders import folder_name, write_shape_folders
    from nemo_launcher.jobs.multimodal.shapes import CLASSES

    root = tmp_path_factory.mktemp("vision_inference")
    write_shape_folders(str(root / "shapes"), train=0, val=15, size=64, seed=0)
    (root / "shapes" / "val" / "broken.png").write_bytes(b"not an image")
    names = sorted(folder_name(label) for label in range(len(CLASSES)))
    return {
        "root": root,
        "images": root / "shapes" / "val",
        "names": names,
        "vit": random_vision_nemo(root / "vit.nemo", "vit/tiny", class_names=names),
        "clip": random_vision_nemo(root / "clip.nemo", "clip/tiny"),
    }


def _run(work, name: str, choice: str, program: str, overrides):
    from nemo_launcher.launch.stage_config import write_stage_config

    config = write_stage_config(
        work["root"] / f"{name}.yaml",
        "fw_inference",
        choice,
        data_dir=work["root"] / "data",
        base_results_dir=work["root"] / "results",
        overrides=["trainer.accelerator=cpu", *overrides],
    )
    return subprocess.run(
        [warm_python.interpreter(), "-m", program, "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def classified(work):
    result = _run(
        work,
        "classify",
        "vit/imagenet1k",
        "nemo_launcher.jobs.vit.classify",
        [
            f"model.restore_from_path={work['vit']}",
            f"data_path={work['images']}",
            "model.micro_batch_size=4",
            "top_k=3",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = (work["root"] / "results").rglob("predictions.json")
    return result, json.loads(path.read_text())


def test_classify_reports_the_models_own_classes_for_every_readable_image(work, classified):
    from nemo_launcher.jobs.vision.saved_models import load_vision_model

    result, report = classified
    assert report["unreadable"] == ["broken.png"]
    images = sorted(p for p in work["images"].rglob("*.png") if p.name != "broken.png")
    assert [row["image"] for row in report["predictions"]] == [str(p.relative_to(work["images"])) for p in images]
    saved = load_vision_model(work["vit"])
    probabilities = torch.softmax(saved.classify(torch.stack([saved.pixels(str(p)) for p in images])), dim=-1)
    for row, expected in zip(report["predictions"], probabilities):
        top = expected.topk(3)
        assert [entry["label"] for entry in row["top_k"]] == top.indices.tolist()
        assert [entry["probability"] for entry in row["top_k"]] == pytest.approx(top.values.tolist(), abs=1e-5)
        assert row["class"] == work["names"][row["label"]]
    agreement = report["folder_agreement"]
    assert agreement["images"] == len(images)
    assert agreement["agreeing"] == sum(row["class"] == row["image"].split("/")[0] for row in report["predictions"])
    assert "probability" in result.stdout and report["predictions"][0]["image"] in result.stdout
    assert "Warning" not in result.stdout + result.stderr


def test_similarity_is_the_models_softmax_over_the_texts(work):
    from nemo_launcher.jobs.vision.saved_models import load_vision_model

    image = sorted(work["images"].rglob("*.png"))[1]
    result = _run(
        work,
        "similarity",
        "clip/clip_similarity",
        "nemo_launcher.jobs.clip.similarity",
        [
            f"model.restore_from_path={work['clip']}",
            f"image_path={image}",
            f"texts=[{','.join(TEXTS)}]",
            "model.micro_batch_size=3",
        ],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = (work["root"] / "results").rglob("similarity.json")
    report = json.loads(path.read_text())
    saved = load_vision_model(work["clip"])
    cosine = (saved.text_features(TEXTS) @ saved.image_features(saved.pixels(str(image))[None])[0]).tolist()
    expected = torch.softmax(torch.tensor(cosine) * saved.logit_scale(), dim=0).tolist()
    assert [row["text"] for row in report["texts"]] == TEXTS
    assert [row["similarity"] for row in report["texts"]] == pytest.approx(cosine, abs=1e-5)
    assert [row["probability"] for row in report["texts"]] == pytest.approx(expected, abs=1e-5)
    assert report["best"] == TEXTS[max(range(len(TEXTS)), key=expected.__getitem__)]
    assert "<- best" in result.stdout and "Warning" not in result.stdout + result.stderr


def test_a_model_of_the_other_family_is_one_error_line(work):
    result = _run(
        work,
        "wrong",
        "clip/clip_similarity",
        "nemo_launcher.jobs.clip.similarity",
        [
            f"model.restore_from_path={work['vit']}",
            f"image_path={sorted(work['images'].rglob('*.png'))[0]}",
            "texts=[a red circle]",
        ],
    )
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("Error: fw_inference.model.restore_from_path=") and "holds a vit model" in line
