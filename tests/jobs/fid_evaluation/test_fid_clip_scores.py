"""The FID and CLIP-score math of the Stable Diffusion evaluation against independent computations: the Fréchet
distance against scipy's matrix square root of the covariance product, its closed forms (a set against itself, a
shifted set, two diagonal Gaussians), through torch-fidelity's Inception on images; the CLIP score against the
cosines recomputed from CLIPModel's own logits."""

import numpy as np
import pytest

from tests.conftest import require_module

require_module("scipy")
require_module("transformers")

from nemo_launcher.jobs.fid_evaluation.frechet import frechet_distance, psd_sqrt, statistics  # noqa: E402


def _scipy_fid(a, b):
    from scipy import linalg

    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = linalg.sqrtm(s_a @ s_b)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a + s_b - 2 * np.real(root)))


@pytest.mark.parametrize("samples,dims", [(200, 8), (300, 32)])
def test_frechet_distance_matches_scipy_sqrtm(samples, dims):
    rng = np.random.default_rng(dims)
    a = rng.normal(size=(samples, dims)) @ rng.normal(size=(dims, dims))
    b = rng.normal(size=(samples, dims)) * rng.uniform(0.5, 2, size=dims) + rng.normal(size=dims)
    ours = frechet_distance(*statistics(a), *statistics(b))
    assert ours == pytest.approx(_scipy_fid(a, b), rel=1e-7)
    assert ours > 1.0
    mu_a, sigma_a = statistics(a)
    assert frechet_distance(mu_a, sigma_a, *statistics(b), root_a=psd_sqrt(sigma_a)) == ours  # fid.py keeps the root


def test_frechet_closed_forms():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 64))  # fewer samples than dimensions: singular covariances, as with few images
    assert frechet_distance(*statistics(a), *statistics(a)) == pytest.approx(0.0, abs=1e-9)
    shift = rng.normal(size=64)
    assert frechet_distance(*statistics(a), *statistics(a + shift)) == pytest.approx(float(shift @ shift), rel=1e-6)
    # Two Gaussians with diagonal covariances: |mu_a - mu_b|^2 + sum (sqrt(var_a) - sqrt(var_b))^2.
    var_a, var_b = rng.uniform(0.5, 3, size=5), rng.uniform(0.5, 3, size=5)
    mu_a, mu_b = rng.normal(size=5), rng.normal(size=5)
    expected = ((mu_a - mu_b) ** 2).sum() + ((np.sqrt(var_a) - np.sqrt(var_b)) ** 2).sum()
    assert frechet_distance(mu_a, np.diag(var_a), mu_b, np.diag(var_b)) == pytest.approx(expected, rel=1e-12)


@pytest.fixture(scope="module")
def inception(tmp_path_factory):
    from nemo_launcher.jobs.fid_evaluation.inception import load_inception, write_random_inception

    return load_inception(write_random_inception(str(tmp_path_factory.mktemp("inception") / "inception.pth")))


def _shapes(count, colour):
    from PIL import Image, ImageDraw

    images = []
    for index in range(count):
        image = Image.new("RGB", (48, 48), (150 + 10 * index, 150, 150))
        ImageDraw.Draw(image).ellipse((4 + 3 * index, 6, 30 + 3 * index, 34), fill=colour)
        images.append(image)
    return images


def test_fid_of_images_through_inception(inception):
    import sys

    from nemo_launcher.jobs.fid_evaluation.inception import inception_features

    reds, blues = _shapes(4, (220, 30, 30)), _shapes(4, (30, 30, 220))
    red = inception_features(inception, reds)
    assert red.shape == (4, 2048) and np.isfinite(red).all() and red.std(0).max() > 0
    assert frechet_distance(*statistics(red), *statistics(inception_features(inception, reds))) == pytest.approx(
        0.0, abs=1e-6
    )
    assert frechet_distance(*statistics(red), *statistics(inception_features(inception, blues))) > 1e-3
    assert "torchvision" not in sys.modules


def test_clip_score_matches_clipmodel_logits(tmp_path):
    import torch

    from nemo_launcher.jobs.fid_evaluation.clip_score import ClipScorer
    from tests.jobs.fid_support import write_tiny_clip

    folder = write_tiny_clip(str(tmp_path / "clip"))
    scorer = ClipScorer(folder)
    images = _shapes(3, (220, 30, 30))
    captions = ["a red circle", "a circle", "blue"]
    ours = scorer.similarities(images, captions, batch_size=2)
    batch = scorer.tokenizer(captions, padding=True, return_tensors="pt")
    pixels = scorer.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = scorer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], pixel_values=pixels)
    expected = (out.logits_per_image.diagonal() / scorer.model.logit_scale.exp()).detach().numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(ours) <= 1.0) and len(set(np.round(ours, 6))) == 3


def test_plot_reports_mlperf_quality_targets(tmp_path):
    """mlperf_fid_clip's targets (FID <= 90, CLIP >= 0.15): the plot step says per guidance scale which are met."""
    import json

    from nemo_launcher.jobs.fid_evaluation import plot
    from nemo_launcher.launch.stage_config import write_stage_config

    results = tmp_path / "eval"
    results.mkdir()
    (results / "fid_scores.csv").write_text("cfg,fid\n2,120.5\n8,85.0\n")
    (results / "clip_scores.csv").write_text("cfg,clip_score\n2,0.16\n8,0.149\n")
    config = write_stage_config(
        tmp_path / "mlperf.yaml",
        "evaluation",
        "stable_diffusion/mlperf_fid_clip",
        data_dir=tmp_path / "data",
        base_results_dir=tmp_path / "results",
        overrides=[f"run.results_dir={results}", "fid.classifier_free_guidance=[2,8]", "run.node_array_size=2"],
    )
    report = plot.main(["--config", str(config)])
    verdict = json.loads((results / "quality_targets.json").read_text())
    assert verdict["targets"] == {"fid_at_most": 90, "clip_score_at_least": 0.15}
    assert verdict["per_guidance_scale"]["2"] == {
        "fid": 120.5,
        "clip_score": 0.16,
        "fid_met": False,
        "clip_score_met": True,
        "all_met": False,
    }
    assert verdict["per_guidance_scale"]["8"]["fid_met"] and not verdict["per_guidance_scale"]["8"]["clip_score_met"]
    assert verdict["reached_at_guidance_scales"] == []
    assert ("quality targets", "not met at any guidance scale") in report.notes
    assert (results / "fid_clip_plot.pdf").read_bytes().startswith(b"%PDF")
