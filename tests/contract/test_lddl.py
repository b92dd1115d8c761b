"""The LDDL rules both sides bind (contract/lddl.py): the data preparation's lddl section, data_prefix as the seed's
three folders, and the bins a folder holds against the model's positions. Folders are laid out by hand here (the
rules read names and lddl_bins.json, never the parquet rows); tests/jobs/bert/test_lddl_pipeline.py runs the real
preparation."""

import json

import pytest

from nemo_launcher.contract.binding import JobConfigError, bind
from nemo_launcher.contract.lddl import (
    BINS_FILE,
    LddlBinning,
    bin_of,
    check_bins,
    check_prepared_bins,
    lddl_folders,
    shard_file,
)

KEY = "training.model.data.data_prefix"


def _binning(**values) -> LddlBinning:
    return bind(LddlBinning, {"output_dir": "/data/lddl", **values}, "data_preparation.lddl")


def _folders(root, bins=4, bin_size=32, shards=(0, 1), record=True, skip=()):
    """train/validation/test folders of `shards` x `bins` empty shard files (but the (shard, bin) pairs in skip)."""
    folders = []
    for split in ("train", "validation", "test"):
        folder = root / split
        folder.mkdir(parents=True)
        for shard in shards:
            for bin_id in range(bins):
                if (shard, bin_id) not in skip:
                    (folder / shard_file(shard, bin_id)).touch()
        if record:
            (folder / BINS_FILE).write_text(
                json.dumps({"bin_size": bin_size, "bins": bins, "target_seq_length": bins * bin_size})
            )
        folders.append(str(folder))
    return folders


def test_bins_follow_lddl_numbering():
    # LDDL: bin (num_tokens - 1) // bin_size, the last taking the rest; files shard-<i>.parquet_<bin>.
    assert [bin_of(n, 64, 8) for n in (5, 64, 65, 128, 512, 600)] == [0, 0, 1, 1, 7, 7]
    assert shard_file(3, 7) == "shard-3.parquet_7"
    assert _binning(target_seq_length=512, bin_size=64).bins == 8


@pytest.mark.parametrize(
    "values, words",
    [
        ({"bin_size": 48}, ["data_preparation.lddl.bin_size=48", "divide target_seq_length (512)", "e.g. 64"]),
        ({"bin_size": 1024}, ["bin_size=1024", "divide"]),
        ({"target_seq_length": 4, "bin_size": 4}, ["target_seq_length=4", "at least 5"]),
        ({"splits_string": "0,5,5"}, ["lddl.splits_string='0,5,5'", "no training data"]),
        ({"short_seq_prob": 1.5}, ["short_seq_prob=1.5", "[0, 1]"]),
        ({"duplicate_factor": 0}, ["duplicate_factor=0"]),
    ],
)
def test_binning_section_is_refused_with_the_fix(values, words):
    with pytest.raises(JobConfigError) as caught:
        _binning(**values)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


@pytest.mark.parametrize(
    "prefix",
    [None, ["/d/train", "/d/validation"], [1.0, "/d/train", 1.0, "/d/validation"], "/d/train", ["/d/a.bin"] * 3],
)
def test_data_prefix_must_be_the_seeds_three_folders(prefix):
    with pytest.raises(JobConfigError) as caught:
        lddl_folders(prefix, KEY)
    assert str(caught.value).startswith(f"{KEY}={prefix!r}: ")


def test_the_seeds_folders_are_accepted_as_it_writes_them():
    seed = ["/path/to/train/LDDL/Dataset", "/path/to/val/LDDL/Dataset", "/path/to/test/LDDL/Dataset"]
    assert lddl_folders(seed, KEY) == tuple(seed)
    check_bins(seed, 512, KEY)  # not on this host: left to the launcher's input check and to the job


def test_complete_bins_within_the_positions_pass(tmp_path):
    check_bins(_folders(tmp_path), positions=128, key=KEY)


def test_bins_above_the_positions_are_refused(tmp_path):
    with pytest.raises(JobConfigError) as caught:
        check_bins(_folders(tmp_path), positions=64, key=KEY)
    message = str(caught.value)
    assert "ends at 128 tokens (4 bins of 32)" in message and "model's 64 positions" in message
    assert "lddl.target_seq_length <= 64" in message


def test_a_missing_bin_is_refused(tmp_path):
    folders = _folders(tmp_path, skip=[(0, 2), (1, 2)])
    with pytest.raises(JobConfigError) as caught:
        check_bins(folders, positions=128, key=KEY)
    assert "holds bins [0, 1, 3]" in str(caught.value) and "missing: [2]" in str(caught.value)


def test_bins_beyond_the_record_are_refused(tmp_path):
    folders = _folders(tmp_path, bins=4)
    (tmp_path / "train" / shard_file(0, 4)).touch()
    with pytest.raises(JobConfigError) as caught:
        check_bins(folders, positions=512, key=KEY)
    assert "extra: [4]" in str(caught.value)


def test_a_folder_without_binned_shards_is_refused(tmp_path):
    folders = _folders(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "part.0.parquet").touch()  # LDDL's output without --bin-size: not trainable here (the seed says so)
    with pytest.raises(JobConfigError) as caught:
        check_bins([folders[0], folders[1], str(empty)], positions=128, key=KEY)
    assert f"{empty} (the test folder) holds no binned LDDL shards" in str(caught.value)


def test_folders_of_the_lddl_package_without_a_record_are_checked_for_gaps_only(tmp_path):
    check_bins(_folders(tmp_path, record=False), positions=8, key=KEY)
    with pytest.raises(JobConfigError):
        check_bins(_folders(tmp_path / "gap", record=False, skip=[(0, 1), (1, 1)]), positions=8, key=KEY)


def test_a_pipelines_own_binning_is_held_to_the_training_positions():
    data = {"lddl": {"target_seq_length": 512}}
    training = {"model": {"max_position_embeddings": 256, "data": {"dataloader_type": "LDDL"}}}
    with pytest.raises(JobConfigError) as caught:
        check_prepared_bins(data, training, "the data_preparation stage")
    assert str(caught.value).startswith("training.model.max_position_embeddings=256: ")
    training["model"]["max_position_embeddings"] = 512
    check_prepared_bins(data, training, "the data_preparation stage")
