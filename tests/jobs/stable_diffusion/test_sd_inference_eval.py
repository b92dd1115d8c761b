"""Stable Diffusion's evaluation and framework inference run for real on a briefly trained tiny model: the tiny COCO
data preparation and the four fid_clip steps (the configs the launcher writes, steps called as their jobs call
them), download_coco2014's preprocessing of a COCO-format set, text2img and dreambooth's text2img with class scoring,
and InstructPix2Pix's edit_cli on an 8-channel UNet made from the SD one as InstructPix2Pix's training starts.

The model is trained long enough to check that a caption steers what it draws: 500 steps of 16 examples of the 12
classes of generated shapes, at twice the tiny config's learning rate. The metric: each sampled latent's nearest class
mean (mean squared difference to the mean VAE latent of each class's held-out images, fw_inference's class_scores);
the share whose nearest mean is the class its caption names, against chance (1/12), and the mean distance to the
caption's class against that to the other classes, over 8 samples per caption. When written: 22% nearest (chance
8%), distance to the own class 0.79 of that to the others; 400 steps gave 19% and 0.84, 600 steps 18% and 0.71."""

import csv
import dataclasses
import json
import os
import subprocess

import pytest

from tests.conftest import require_module

require_module("diffusers")
require_module("transformers")

from tests.jobs import warm_python  # noqa: E402
from tests.jobs.gpt_train_support import environment  # noqa: E402
from tests.jobs.vision_support import REPO, log_dir, run_training, write_config, write_shape_tars  # noqa: E402

from .test_stable_diffusion_train import PROGRAM, _precache  # noqa: E402


@pytest.fixture(scope="module")
def sd_nemo(tmp_path_factory):
    """A tiny SD trained on the shapes for 500 steps (every program reads the .nemo; the caption check needs the
    steps)."""
    work = tmp_path_factory.mktemp("sd_eval")
    data = work / "data"
    write_shape_tars(data / "raw", examples=480, per_tar=240)
    _precache(data / "raw", data / "tiny_sd" / "precached", REPO / "conf" / "_precache" / "tiny_sd.yaml")
    config = write_config(
        work,
        data,
        "stable_diffusion/tiny",
        [
            f"model.data.train.dataset_path=[{data}/tiny_sd/precached]",
            "trainer.max_steps=500",
            "trainer.val_check_interval=500",
            "trainer.log_every_n_steps=100",
            "exp_manager.checkpoint_callback_params.every_n_train_steps=500",
            "model.micro_batch_size=16",
            "model.optim.lr=2e-3",
        ],
    )
    run_training(config, program=(PROGRAM,), timeout=900)  # about 150 s alone, several times that on a loaded CI worker
    return work, log_dir(work, "stable_diffusion_tiny") / "checkpoints" / "nemo_stable_diffusion.nemo"


def _stage_config(work, name, stage, choice, overrides=()):
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / name, stage, choice, data_dir=work / "data", base_results_dir=work / "results", overrides=list(overrides)
    )


def _run(module, config, expect_rc=0):
    result = subprocess.run(
        [warm_python.interpreter(), "-m", module, "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == expect_rc, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _quiet(stderr):
    """Only our own lines: no third-party warnings, progress bars or tracebacks."""
    lines = [
        line for line in stderr.splitlines() if line.strip() and not line.startswith("optional accelerators absent")
    ]
    assert not lines, "\n".join(lines[:20])


def test_tiny_coco_preparation_and_the_four_fid_clip_steps(sd_nemo, monkeypatch):
    from PIL import Image

    from nemo_launcher.jobs.fid_evaluation import (
        clip,
        fid,
        generate,
        generate_shapes,
        plot,
        preprocess,
        standin_scorers,
    )

    work, _ = sd_nemo
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    data_config = _stage_config(work, "coco.yaml", "data_preparation", "fid_evaluation/tiny_coco2014")
    for step in (generate_shapes, standin_scorers, preprocess):
        step.main(["--config", str(data_config)])
    root = work / "data" / "fid_evaluation" / "tiny_coco2014"
    real = sorted((root / "coco2014_val" / "images_32").iterdir())
    assert len(real) == 12 and {Image.open(path).size for path in real} == {(32, 32)}
    captions = sorted((root / "coco2014_val_sampled" / "captions").glob("*.txt"))
    assert len(captions) == 8

    config = _stage_config(work, "fid_clip.yaml", "evaluation", "stable_diffusion/tiny_fid_clip")
    for step in (generate, fid, clip, plot):
        step.main(["--config", str(config)])
    results = work / "results" / "stable_diffusion_tiny" / "eval_fid_clip_stable_diffusion_tiny"
    for scale in ("1.5", "4"):
        images = sorted((results / "generated_images" / f"cfg{scale}").glob("*.png"))
        assert [p.stem for p in images] == [p.stem for p in captions]  # one image per caption, named after it
        assert Image.open(images[0]).size == (32, 32)
    rows = {name: list(csv.DictReader(open(results / name))) for name in ("fid_scores.csv", "clip_scores.csv")}
    assert (
        [row["cfg"] for row in rows["fid_scores.csv"]]
        == ["1.5", "4"]
        == [row["cfg"] for row in rows["clip_scores.csv"]]
    )
    assert all(float(row["fid"]) > 0 for row in rows["fid_scores.csv"])
    assert all(-1 <= float(row["clip_score"]) <= 1 for row in rows["clip_scores.csv"])
    assert (results / "fid_clip_plot.pdf").read_bytes().startswith(b"%PDF")
    # The two guidance scales draw different images from the same noise.
    first = [
        Image.open(results / "generated_images" / f"cfg{s}" / f"{captions[0].stem}.png").tobytes() for s in ("1.5", "4")
    ]
    assert first[0] != first[1]
    # A rerun of generate keeps what is there.
    before = os.path.getmtime(results / "generated_images" / "cfg4" / f"{captions[0].stem}.png")
    generate.main(["--config", str(config)])
    assert os.path.getmtime(results / "generated_images" / "cfg4" / f"{captions[0].stem}.png") == before


def _coco_set(root):
    """Three non-square images and five captions in COCO's layout."""
    from PIL import Image

    os.makedirs(root / "val2014")
    images = []
    for number, (width, height) in enumerate(((60, 40), (30, 50), (40, 40)), start=1):
        image = Image.new("RGB", (width, height), (255, 0, 0))
        # A blue band at the left edge of the landscape image: the centre crop cuts it away.
        image.paste((0, 0, 255), (0, 0, 10, height))
        name = f"COCO_val2014_{number:012d}.jpg"
        image.save(root / "val2014" / name, quality=95)
        images.append({"id": number, "file_name": name})
    annotations = [{"id": 10 + k, "image_id": 1 + k % 3, "caption": f" caption {k} "} for k in range(5)]
    (root / "captions_val2014.json").write_text(json.dumps({"images": images, "annotations": annotations}))


def test_download_coco2014_preprocesses_a_local_coco_set(tmp_path):
    from PIL import Image

    from nemo_launcher.jobs.fid_evaluation import preprocess

    root = tmp_path / "data" / "fid_evaluation" / "coco2014"
    _coco_set(root)
    config = _stage_config(
        tmp_path,
        "coco.yaml",
        "data_preparation",
        "fid_evaluation/download_coco2014",
        ["num_captions=3", "image_size=16", "num_processes=1"],
    )
    preprocess.main(["--config", str(config)])
    images = sorted((root / "coco2014_val" / "images_256").iterdir())
    assert [p.name for p in images] == [f"COCO_val2014_{n:012d}.png" for n in (1, 2, 3)]
    landscape = Image.open(images[0])
    assert landscape.size == (16, 16) and max(abs(a - b) for a, b in zip(landscape.getpixel((0, 8)), (255, 0, 0))) < 40
    captions = sorted((root / "coco2014_val_sampled_30k" / "captions").iterdir())
    assert len(captions) == 3 and all(
        p.read_text() == f"caption {int(p.stem.rsplit('_', 1)[1]) - 10}\n" for p in captions
    )
    # The same seed samples the same captions; a file left from other settings is removed.
    (root / "coco2014_val_sampled_30k" / "captions" / "stale_1.txt").write_text("old\n")
    preprocess.main(["--config", str(config)])
    assert sorted((root / "coco2014_val_sampled_30k" / "captions").iterdir()) == captions


def test_download_coco2014_refuses_a_file_that_is_not_coco_captions(tmp_path):
    root = tmp_path / "data" / "fid_evaluation" / "coco2014"
    _coco_set(root)
    (root / "captions_val2014.json").write_text(json.dumps({"annotations": []}))
    config = _stage_config(
        tmp_path, "coco.yaml", "data_preparation", "fid_evaluation/download_coco2014", ["preprocess_images=false"]
    )
    result = _run("nemo_launcher.jobs.fid_evaluation.preprocess", config, expect_rc=2)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: data_preparation.coco_captions_file=") and "not a COCO captions file" in line


def _text2img_config(work, choice, nemo, reference, out):
    return _stage_config(
        work,
        f"{choice.replace('/', '_')}.yaml",
        "fw_inference",
        choice,
        [
            f"model.restore_from_path={nemo}",
            "trainer.accelerator=cpu",
            "trainer.precision=32",
            "infer.height=32",
            "infer.width=32",
            "infer.down_factor=2",
            "infer.inference_steps=4",
            "infer.num_images_per_prompt=2",
            "infer.combine_images=[1,2]",
            "infer.prompts=[a photo of a red circle,a blue square,a photo of a sks dog]",
            f"class_reference_dir={reference}",
            f"infer.out_path={out}",
        ],
    )


def _check_text2img(out, sampler):
    from PIL import Image

    report = json.loads((out / "text2img.json").read_text())
    assert len(report["images"]) == 3 * 2 + 3 and Image.open(out / "grid_00.png").size == (64, 32)
    assert report["sampler_type"] == sampler
    for space in ("latent", "pixel"):
        scores = report["class_scores"][space]
        # Two of the three prompts name one of the 12 classes; the dog is not scored.
        assert sorted(scores["per_prompt"]) == ["blue square", "red circle"] and scores["chance"] == pytest.approx(
            1 / 12
        )
        assert 0 <= scores["accuracy"] <= 1 and scores["metric"]


@pytest.fixture(scope="module")
def reference(sd_nemo):
    from nemo_launcher.jobs.multimodal.shape_folders import write_shape_folders

    folder = sd_nemo[0] / "data" / "shape_folders"
    write_shape_folders(str(folder), train=480, val=120, size=32, seed=0)
    return folder / "val"


def test_text2img_writes_images_grids_and_class_scores(sd_nemo, reference):
    work, nemo = sd_nemo
    out = work / "results" / "text2img"
    result = _run(
        "nemo_launcher.jobs.stable_diffusion.text2img",
        _text2img_config(work, "stable_diffusion/text2img", nemo, reference, out),
    )
    _quiet(result.stderr)
    _check_text2img(out, "PLMS")
    assert "nearest class (latent)" in result.stdout


def test_a_caption_steers_the_image_to_its_class(sd_nemo, reference):
    from nemo_launcher.jobs.multimodal.shapes import CLASSES

    work, nemo = sd_nemo
    out = work / "results" / "classes"
    config = _stage_config(
        work,
        "classes.yaml",
        "fw_inference",
        "stable_diffusion/text2img",
        [
            f"model.restore_from_path={nemo}",
            "trainer.accelerator=cpu",
            "trainer.precision=32",
            "infer.height=32",
            "infer.width=32",
            "infer.down_factor=2",
            "infer.sampler_type=DDIM",
            "infer.inference_steps=20",
            "infer.unconditional_guidance_scale=7.5",
            "infer.num_images_per_prompt=8",
            "infer.combine_images=null",
            f"infer.prompts=[{','.join(f'a photo of a {c}' for c in CLASSES)}]",
            f"class_reference_dir={reference}",
            f"infer.out_path={out}",
        ],
    )
    _run("nemo_launcher.jobs.stable_diffusion.text2img", config)
    scores = json.loads((out / "text2img.json").read_text())["class_scores"]["latent"]
    assert scores["classes"] == 12 and len(scores["per_prompt"]) == 12
    assert scores["accuracy"] >= 2 * scores["chance"], scores
    own = sum(p["distance_to_own_class"] for p in scores["per_prompt"].values()) / 12
    other = sum(p["distance_to_other_classes"] for p in scores["per_prompt"].values()) / 12
    assert own < 0.85 * other, (own, other)


def test_dreambooth_text2img_is_the_same_program_with_ddim(sd_nemo, reference):
    import yaml

    from nemo_launcher.contract.schemas.sd_inference import Text2ImgConfig
    from nemo_launcher.jobs.stable_diffusion.inference import load_model
    from nemo_launcher.jobs.stable_diffusion.text2img import generate

    work, nemo = sd_nemo
    out = work / "results" / "dreambooth"
    config = _text2img_config(work, "dreambooth/text2img", nemo, reference, out)
    cfg = Text2ImgConfig.from_dict(yaml.safe_load(config.read_text()))
    generate(cfg, load_model(cfg))
    _check_text2img(out, "DDIM")


def _ip2p_nemo(sd_nemo_path, target):
    """InstructPix2Pix's starting point, widened as its training widens it: the SD UNet with 8 input channels, the
    input image's 4 zero-initialised."""
    from nemo_launcher.jobs.stable_diffusion.finetune import widened
    from nemo_launcher.jobs.stable_diffusion.model import build_unet, load_stable_diffusion, save_stable_diffusion

    parts = load_stable_diffusion(sd_nemo_path)
    config = dataclasses.replace(parts.config, unet_config=dataclasses.replace(parts.config.unet_config, in_channels=8))
    unet = build_unet(config, load_pretrained=False)
    unet.load_state_dict(widened(parts.unet.state_dict(), unet, str(sd_nemo_path), "model.ckpt_path"))
    save_stable_diffusion(target, dataclasses.replace(parts, unet=unet, config=config))
    return target


def test_edit_cli_edits_an_image_by_an_instruction(sd_nemo):
    from PIL import Image

    from nemo_launcher.jobs.multimodal.shapes import shape_example

    work, nemo = sd_nemo
    ip2p = _ip2p_nemo(nemo, work / "nemo_instruct_pix2pix.nemo")
    image, _, _ = shape_example(0, 0, 48)
    image.crop((0, 0, 48, 40)).save(work / "input.png")
    out = work / "results" / "edit"
    common = [
        "trainer.accelerator=cpu",
        "trainer.precision=32",
        f"edit.input={work / 'input.png'}",
        "edit.prompt=make it blue",
        "edit.resolution=32",
        "edit.steps=3",
        "edit.num_images_per_prompt=4",
        "edit.combine_images=[2,2]",
        f"edit.outpath={out}",
    ]
    result = _run(
        "nemo_launcher.jobs.stable_diffusion.edit_cli",
        _stage_config(
            work, "edit.yaml", "fw_inference", "instruct_pix2pix/edit_cli", [f"model.restore_from_path={ip2p}", *common]
        ),
    )
    _quiet(result.stderr)
    report = json.loads((out / "edit.json").read_text())
    # The longer side is scaled to 32 and each side cut to the model's multiple (VAE 2 x UNet 2 = 4): 32 x 24.
    assert report["size"] == [32, 24] and len(report["images"]) == 5
    assert Image.open(out / "edit_00.png").size == (32, 24) and Image.open(out / "grid.png").size == (64, 48)
    # A Stable Diffusion .nemo (4-channel UNet) is refused, naming the key and the fix.
    import yaml

    from nemo_launcher.contract.schemas.sd_inference import EditConfig
    from nemo_launcher.jobs.common.config import JobConfigError
    from nemo_launcher.jobs.stable_diffusion.edit_cli import edit
    from nemo_launcher.jobs.stable_diffusion.inference import load_model

    config = _stage_config(
        work, "edit_sd.yaml", "fw_inference", "instruct_pix2pix/edit_cli", [f"model.restore_from_path={nemo}", *common]
    )
    cfg = EditConfig.from_dict(yaml.safe_load(config.read_text()))
    with pytest.raises(JobConfigError, match=r"^fw_inference.model.restore_from_path=.*InstructPix2Pix"):
        edit(cfg, load_model(cfg))
