"""Class folders packed into WebDataset shards (data_preparation=vit/imagenet_webdataset), on the generated shapes:
every image once, its bytes as stored and its label as the training folder's class index; wdinfo.pkl lists the
tars as the CLIP loader reads them; a rerun keeps the finished tars and writes only a missing one, byte for byte;
new images rewrite the split. The step program runs on the config the launcher writes."""

import json
import os
import pickle
import subprocess

import pytest

from nemo_launcher.jobs.multimodal.shape_folders import write_shape_folders
from nemo_launcher.jobs.multimodal.tars import examples
from nemo_launcher.jobs.vision.imagenet_shards import pack_split
from tests.jobs import warm_python
from tests.jobs.gpt_train_support import REPO, environment


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("shape_folders")
    write_shape_folders(str(root), train=60, val=24, size=32, seed=0)
    return root


def _unpacked(folder):
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".tar"):
            for key, members in examples(str(folder / name)):
                found[key] = members
    return found


def test_every_image_once_with_its_bytes_and_label(folders, tmp_path):
    done = pack_split(str(folders / "train"), str(tmp_path), per_shard=25, seed=0)
    classes = sorted(os.listdir(folders / "train"))
    assert done["classes"] == classes and done["images"] == 60 and done["shards"] == 3
    stored = {}
    for label, name in enumerate(classes):
        for image in os.listdir(folders / "train" / name):
            stored[(folders / "train" / name / image).read_bytes()] = label
    packed = _unpacked(tmp_path)
    assert len(packed) == 60
    for members in packed.values():
        assert (
            stored.pop(members[".png"]) == int(members[".cls"])
            and members[".txt"].decode() == classes[int(members[".cls"])]
        )
    assert not stored  # every image exactly once
    info = pickle.loads((tmp_path / "wdinfo.pkl").read_bytes())
    assert info["tar_files"] == ["000000.tar", "000001.tar"] and info["partial_tar_files"] == {"000002.tar": 10}
    assert json.loads((tmp_path / "classes.json").read_text()) == classes

    from nemo_launcher.jobs.vision.shards import list_shards

    assert sum(shard.examples for shard in list_shards([str(tmp_path / "wdinfo.pkl")], "key")) == 60


def test_rerun_writes_only_a_missing_tar_and_new_images_rewrite_the_split(folders, tmp_path):
    target = tmp_path / "train"
    pack_split(str(folders / "train"), str(target), per_shard=25, seed=0)
    before = {name: (target / name).read_bytes() for name in os.listdir(target) if name.endswith(".tar")}
    (target / "000001.tar").unlink()
    again = pack_split(str(folders / "train"), str(target), per_shard=25, seed=0)
    assert again["written"] == ["000001.tar"] and again["kept"] == ["000000.tar", "000002.tar"]
    assert {name: (target / name).read_bytes() for name in before} == before
    source = tmp_path / "source"
    write_shape_folders(str(source), train=70, val=1, size=32, seed=0)
    changed = pack_split(str(source / "train"), str(target), per_shard=25, seed=0)
    assert changed["written"] == ["000000.tar", "000001.tar", "000002.tar"] and len(_unpacked(target)) == 70


def test_the_step_program_packs_both_splits_with_the_training_labels(folders, tmp_path):
    from nemo_launcher.launch.stage_config import write_stage_config

    config = write_stage_config(
        tmp_path / "cfg.yaml",
        "data_preparation",
        "vit/imagenet_webdataset",
        data_dir=tmp_path,
        base_results_dir=tmp_path / "results",
        overrides=[f"input_dir={folders}", f"output_dir={tmp_path / 'wds'}", "examples_per_shard=50"],
    )
    result = subprocess.run(
        [warm_python.interpreter(), "-m", "nemo_launcher.jobs.vision.imagenet_shards", "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "imagenet_shards finished: 3 shards done" in result.stdout
    assert len(_unpacked(tmp_path / "wds" / "val")) == 24
    assert json.loads((tmp_path / "wds" / "val" / "classes.json").read_text()) == sorted(os.listdir(folders / "train"))
