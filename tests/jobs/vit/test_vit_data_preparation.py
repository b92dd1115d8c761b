"""data_preparation=vit/tiny_shape_folders writes what training=vit/tiny reads: the pipeline of both, run on the
interactive backend with the configs' own paths, passes the launch input check, writes the class folders with a
summary, and the ViT trains and validates on them; a rerun keeps the folders, other settings rewrite them whole,
and a folder the step did not write is refused in one line."""

import json
import os
import re
import subprocess
import sys

import pytest

from nemo_launcher.jobs.multimodal.shape_folders import ForeignFolders, folder_name, write_shape_folders
from nemo_launcher.jobs.multimodal.shapes import CLASSES
from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import require_module

TRAINING = [
    "training.trainer.max_steps=12",
    "training.trainer.log_every_n_steps=4",
    "training.trainer.val_check_interval=12",
    "training.trainer.limit_val_batches=1",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=12",
    "training.model.optim.sched.warmup_steps=2",
]


def _main(*overrides, results, data):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    return subprocess.run(
        [
            sys.executable,
            "main.py",
            "cluster_type=interactive",
            f"base_results_dir={results}",
            f"data_dir={data}",
            *overrides,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _images(folder):
    return {name: len(os.listdir(folder / name)) for name in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    require_module("megatron.core")
    work = tmp_path_factory.mktemp("vit_pipeline")
    results, data = work / "results", work / "data"
    run = _main(
        "stages=[data_preparation,training]",
        "data_preparation=vit/tiny_shape_folders",
        "training=vit/tiny",
        *TRAINING,
        results=results,
        data=data,
    )
    return run, results, data


def test_the_pipeline_prepares_the_folders_training_reads_and_trains(pipeline):
    run, results, data = pipeline
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    prepared = yaml_of(results / "vit_tiny_shape_folders" / "vit_tiny_shape_folders_hydra.yaml")
    training = yaml_of(results / "vit_tiny" / "vit_tiny_hydra.yaml")
    folders = [os.path.join(prepared["output_dir"], split) for split in ("train", "val")]
    assert (
        folders
        == training["model"]["data"]["data_path"]
        == [str(data / "tiny_shapes_folders" / s) for s in ("train", "val")]
    )
    assert len(CLASSES) == training["model"]["num_classes"]

    train, val = (_images(data / "tiny_shapes_folders" / split) for split in ("train", "val"))
    assert sorted(train) == sorted(folder_name(label) for label in range(len(CLASSES))) == sorted(val)
    assert sum(train.values()) == prepared["num_train"] and sum(val.values()) == prepared["num_val"]

    step_log = "".join(p.read_text() for p in (results / "vit_tiny_shape_folders").rglob("log-*.out"))
    assert re.search(r"^shape_folders finished: 1 dataset done$", step_log, re.M), step_log
    assert re.search(r"^  images +480 train, 120 val, 64 x 64 px, 12 classes$", step_log, re.M), step_log

    train_log = "".join(p.read_text() for p in (results / "vit_tiny").rglob("log-*.out"))
    assert len(re.findall(r"^step=\d+/12 ", train_log, re.M)) >= 3, train_log[-3000:]
    assert "top1 accuracy" in train_log
    assert not re.search(r"\w*Warning\b|warn\(", step_log + train_log), "warnings in the job logs"


def test_a_rerun_keeps_the_folders(pipeline, tmp_path):
    _, _, data = pipeline
    marker = data / "tiny_shapes_folders" / "shape_folders.json"
    before = marker.stat().st_mtime_ns
    run = _main(
        "stages=[data_preparation]", "data_preparation=vit/tiny_shape_folders", results=tmp_path / "r", data=data
    )
    assert run.returncode == 0, run.stderr
    log = "".join(p.read_text() for p in (tmp_path / "r").rglob("log-*.out"))
    assert "shape_folders finished: 0 datasets done, 1 already complete" in log, log
    assert marker.stat().st_mtime_ns == before


def test_other_settings_rewrite_the_folders_whole(tmp_path):
    root = str(tmp_path / "shapes")
    assert write_shape_folders(root, train=30, val=6, size=16, seed=0)
    assert not write_shape_folders(root, train=30, val=6, size=16, seed=0)
    assert write_shape_folders(root, train=12, val=12, size=16, seed=0)
    # Images 12..29 of the first settings would otherwise stay in train/ as examples of the new dataset.
    assert sum(_images(tmp_path / "shapes" / "train").values()) == 12
    assert sum(_images(tmp_path / "shapes" / "val").values()) == 12
    assert json.loads((tmp_path / "shapes" / "shape_folders.json").read_text())["train"] == 12


def test_a_folder_the_step_did_not_write_is_refused_and_left_alone(tmp_path):
    (tmp_path / "data" / "tiny_shapes_folders" / "train" / "n01440764").mkdir(parents=True)
    with pytest.raises(ForeignFolders):
        write_shape_folders(str(tmp_path / "data" / "tiny_shapes_folders"), train=4, val=4, size=16, seed=0)
    run = _main(
        "stages=[data_preparation]",
        "data_preparation=vit/tiny_shape_folders",
        results=tmp_path / "r",
        data=tmp_path / "data",
    )
    assert run.returncode != 0
    log = "".join(p.read_text() for p in (tmp_path / "r").rglob("log-*.out"))
    (line,) = [line for line in log.splitlines() if line.startswith("Error:")]
    assert "data_preparation.output_dir=" in line and "was not written by this step" in line, log
    assert os.listdir(tmp_path / "data" / "tiny_shapes_folders" / "train") == ["n01440764"]


def yaml_of(path):
    import yaml

    return yaml.safe_load(path.read_text())
