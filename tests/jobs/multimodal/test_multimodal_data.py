"""The multimodal data steps on a local image server: every example that downloads ends up once in the equal-size
tars, failures are counted and never fatal, reruns and killed runs neither lose nor repeat an example, a task of an
earlier partition is reproduced by override_task_id/override_task_count, and the precached embeddings are the
encoders' own."""

import collections
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from nemo_launcher.jobs.multimodal import (
    download_images,
    download_parquet,
    generate_wdinfo,
    precache_encodings,
    reorganize_tar,
)
from nemo_launcher.jobs.multimodal.tars import count_examples, examples, tar_files
from nemo_launcher.jobs.steps.config import DataConfigError
from tests.jobs.data_support import REPO

from .multimodal_support import KINDS, config_for, image_server, served_repository  # noqa: F401

STEPS = (download_parquet, download_images, reorganize_tar, precache_encodings, generate_wdinfo)
CHUNK = 16


@pytest.fixture(scope="session")
def pipeline(image_server, tmp_path_factory):  # noqa: F811
    """The whole pipeline once over 120 served rows: (config path, data root, {index: caption} of the rows served)."""
    tmp = tmp_path_factory.mktemp("pipeline")
    root, expected = served_repository(image_server, "pipeline", 120, lambda index: KINDS.get(index % 10))
    config = config_for(
        tmp,
        root,
        "download_images.img2dataset_additional_arguments.number_sample_per_shard=25",
        f"reorganize_tar.tar_chunk_size={CHUNK}",
        "download_images.download_num_processes=2",
    )
    os.environ.pop("SLURM_ARRAY_TASK_ID", None)
    for step in STEPS:
        step.main(["--config", config])
    return config, tmp / "data" / "tiny_shapes", expected


def _captions(folder, name_filter=lambda name: True):
    found = []
    for name in tar_files(folder):
        if name_filter(name):
            found += [members[".txt"].decode() for _, members in examples(os.path.join(folder, name))]
    return found


def test_equal_tars_hold_every_downloaded_example_once(pipeline):
    _, data, expected = pipeline
    records = [json.loads(p.read_text()) for p in sorted((data / "tarfiles_raw").glob("*_stats.json"))]
    assert sum(r["count"] for r in records) == 120
    assert sum(r["successes"] for r in records) == len(expected) == 72
    # missing (404), slow (timeout) and error (500) rows fail to download; garbage fails to decode; flaky succeeds
    # on retry.
    assert sum(r["failed_to_download"] for r in records) == 36 and sum(r["failed_to_resize"] for r in records) == 12
    reorganized = data / "tarfiles_reorganized"
    counts = [count_examples(str(reorganized / name), [".jpg", ".txt"]) for name in tar_files(reorganized)]
    assert counts == [CHUNK] * (72 // CHUNK) + [72 % CHUNK]
    assert sorted(_captions(reorganized)) == sorted(expected.values())
    for name in tar_files(reorganized):
        for key, members in examples(str(reorganized / name)):
            assert sorted(members) == [".jpg", ".txt"] and key.isdigit()


def test_precached_examples_hold_the_encoders_embeddings(pipeline):
    config, data, expected = pipeline
    precached = data / "tarfiles_precached"
    seen = []
    for name in tar_files(precached):
        for _key, members in examples(str(precached / name)):
            embeddings = pickle.loads(members[".pickle"])
            assert sorted(members) == [".pickle", ".txt"]  # save_original_in_tar: [text]
            image, text = embeddings["tiny-clip_image"], embeddings["tiny-clip_text"]
            caption = members[".txt"].decode()
            assert image.dtype == np.float16 and image.shape == (16,)
            # store_pad_tokens false: one row per byte of the caption plus its start and end tokens, at most max_length.
            assert text.dtype == np.float32 and text.shape == (min(32, len(caption.encode()) + 2), 32)
            seen.append((caption, text))
    assert sorted(caption for caption, _ in seen) == sorted(expected.values())
    from nemo_launcher.jobs.multimodal.encoders import ClipTextEncoder

    spec = yaml.safe_load((REPO / "conf" / "_precache" / "tiny_clip.yaml").read_text())["encodings"][1][
        "encoder_config"
    ]
    encoder = ClipTextEncoder(**{k: v for k, v in spec.items() if k != "cls"})
    caption, stored = seen[5]
    hidden, mask = encoder.encode([caption])
    np.testing.assert_allclose(stored, hidden[0][mask[0].bool()].numpy(), rtol=1e-5, atol=1e-6)


def test_wdinfo_lists_the_full_tars_and_counts_them(pipeline):
    _, data, expected = pipeline
    with open(data / "wdinfo.pkl", "rb") as handle:
        info = pickle.load(handle)
    assert info["chunk_size"] == CHUNK and info["total_key_count"] == CHUNK * len(info["tar_files"])
    assert info["total_key_count"] + sum(info["partial_tar_files"].values()) == len(expected)
    for name in info["tar_files"]:
        assert count_examples(str(data / name), [".pickle"]) == CHUNK


def test_a_rerun_rewrites_nothing(pipeline):
    config, data, _ = pipeline
    stamps = {p: p.stat().st_mtime_ns for p in data.rglob("*.tar")}
    for step in STEPS[:-1]:
        report = step.main(["--config", config])
        assert not report.finished and report.complete_before, step.__name__
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*.tar")} == stamps


def test_override_task_reproduces_one_task_of_the_partition(pipeline):
    config, data, _ = pipeline
    precached = data / "tarfiles_precached"
    before = {p.name: p.read_bytes() for p in precached.glob("t1_r0_*.tar")}
    assert before
    for path in precached.glob("t1_r0*"):
        path.unlink()
    rerun = _with(
        config,
        override_task_id=1,
        override_task_count=2,
        precache_encodings={"node_array_size": 1},
        reorganize_tar={"enable": False},
    )
    report = precache_encodings.main(["--config", rerun])
    assert report.finished == ["t1_r0"]
    assert {p.name: p.read_bytes() for p in precached.glob("t1_r0_*.tar")} == before


def _with(config, **changes):
    """A copy of the resolved config with top-level keys (and sections, merged) replaced."""
    with open(config) as handle:
        values = yaml.safe_load(handle)
    for key, value in changes.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    path = config.replace("_hydra.yaml", f"_{len(changes)}_{sorted(changes)[0]}_hydra.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump(values, handle)
    return path


def test_an_array_task_outside_the_partition_is_refused(pipeline, monkeypatch):
    config, _, _ = pipeline
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    with pytest.raises(
        DataConfigError,
        match=r"SLURM_ARRAY_TASK_ID='7' is not one of the tasks data_preparation"
        r"\.reorganize_tar\.node_array_size names \(0-1\)",
    ):
        reorganize_tar.main(["--config", config])


def test_a_killed_download_resumes_without_losing_or_repeating_an_example(image_server, tmp_path):  # noqa: F811
    root, expected = served_repository(
        image_server, "killed", 80, lambda index: "missing" if index % 10 == 1 else "delay"
    )
    config = config_for(
        tmp_path,
        root,
        "download_images.img2dataset_additional_arguments.number_sample_per_shard=8",
        "download_images.download_num_threads=2",
        "download_images.download_num_processes=1",
        f"reorganize_tar.tar_chunk_size={CHUNK}",
    )
    download_parquet.main(["--config", config])
    raw = tmp_path / "data" / "tiny_shapes" / "tarfiles_raw"
    process = subprocess.Popen(
        [sys.executable, "-m", "nemo_launcher.jobs.multimodal.download_images", "--config", config],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(list(raw.glob("*_stats.json"))) < 3:
        assert process.poll() is None and time.monotonic() < deadline, "download_images ended before it was killed"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = len(list(raw.glob("*_stats.json")))
    assert finished < 12, "every shard finished before the kill; the test needs slower downloads"
    report = download_images.main(["--config", config])
    # 4 parquet parts of 20 rows, in shards of 8, 8 and 4 rows.
    assert len(report.complete_before) == finished and len(report.finished) == 12 - finished
    keys = collections.Counter(key for name in tar_files(raw) for key, _ in examples(str(raw / name)))
    assert len(keys) == len(expected) and set(keys.values()) == {1}
    reorganize_tar.main(["--config", config])
    assert sorted(_captions(tmp_path / "data" / "tiny_shapes" / "tarfiles_reorganized")) == sorted(expected.values())
    assert not list(raw.glob("*.tmp-*"))
