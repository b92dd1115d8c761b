"""`python3 main.py --config-name=quickstart_sd` end to end on this CPU: the precached shapes, the tiny Stable
Diffusion trained on them (its loss falls), text2img's PNGs and text2img.json, and the FID/CLIP evaluation's
generated images, score files and plot, at the paths the launcher prints.

The scorers are random stand-ins, so the numbers say nothing about quality: FID is checked to be finite and
above zero (the generated and the reference sets differ), the CLIP score to be a cosine.
"""

import csv
import json
import math
import os
import re
import subprocess
import sys

from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import require_module

SCALES = {1.5, 4.0}  # evaluation=stable_diffusion/tiny_fid_clip's guidance scales


def _scores(path, column):
    with open(path, newline="") as handle:
        return {float(row["cfg"]): float(row[column]) for row in csv.DictReader(handle)}


def test_sd_quickstart_trains_draws_and_scores(tmp_path):
    for module in ("diffusers", "transformers", "webdataset", "pyarrow", "matplotlib"):
        require_module(module)
    results, data = tmp_path / "results", tmp_path / "data"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [sys.executable, "main.py", "--config-name=quickstart_sd", f"base_results_dir={results}", f"data_dir={data}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    model_dir = results / "stable_diffusion_tiny"
    inference = model_dir / "fw_inference_stable_diffusion_tiny"
    evaluation = model_dir / "eval_fid_clip_stable_diffusion_tiny"
    for line in (f"training: {model_dir}", f"fw_inference: {inference}", f"evaluation: {evaluation}"):
        assert line in run.stdout, line
    assert (data / "tiny_sd" / "wdinfo.pkl").is_file()
    logs = "\n".join(path.read_text() for path in sorted(results.rglob("log-*.out")))
    curve = [float(v) for v in re.findall(r"^step=\d+/\d+ loss=([0-9.]+)", logs, re.M)]
    # v-prediction's loss keeps a floor (the image a caption cannot tell), so it falls by less than an eps loss does.
    assert len(curve) == 8 and sum(curve[-2:]) / 2 < 0.85 * curve[0], curve
    assert not re.search(r"\w*Warning\b|warn\(", logs), "warnings in the job logs"
    assert (model_dir / "results" / "checkpoints" / "nemo_stable_diffusion.nemo").is_file()

    # text2img: 2 images for each of 4 prompts and a 1 x 2 grid per prompt, all listed in text2img.json.
    listing = json.loads((inference / "text2img.json").read_text())
    assert len(listing["prompts"]) == 4
    assert len(list((inference / "images").glob("*.png"))) == 8
    assert len(listing["images"]) == 12 and all((inference / image).is_file() for image in listing["images"])

    # evaluation: 4 captions drawn at each guidance scale, scored against the 6 reference images, then plotted.
    for scale in SCALES:
        assert len(list((evaluation / "generated_images" / f"cfg{scale:g}").glob("*.png"))) == 4
    fid, clip = _scores(evaluation / "fid_scores.csv", "fid"), _scores(evaluation / "clip_scores.csv", "clip_score")
    assert set(fid) == SCALES and set(clip) == SCALES, (fid, clip)
    assert all(math.isfinite(value) and value > 0 for value in fid.values()), fid
    assert all(-1 <= value <= 1 for value in clip.values()), clip
    assert (evaluation / "fid_clip_plot.pdf").read_bytes().startswith(b"%PDF")
