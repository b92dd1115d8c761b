"""BERT with LDDL at launch: the seed's setting dry-runs as the seed writes it, the LDDL data preparation plans its
binning step, and what the job would refuse after the queue wait is refused here (exit 2, one line, the fix)."""

import json

import pytest

from nemo_launcher.contract.lddl import BINS_FILE, shard_file

from .conftest import plan_rows

# The seed's snippet (section 5.1.2.4.4): data_prefix as the three LDDL folders and dataloader_type LDDL.
SEED_FOLDERS = "[/path/to/train/LDDL/Dataset,/path/to/val/LDDL/Dataset,/path/to/test/LDDL/Dataset]"
SEED_LDDL = [f"training.model.data.data_prefix={SEED_FOLDERS}", "training.model.data.dataloader_type=LDDL"]


def _one_line_refusal(code, out, err, results, *words):
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def _binned(root, target=128, bin_size=32):
    """train/validation/test folders of one shard's bins and their lddl_bins.json, as lddl_bin writes them."""
    folders = []
    for split in ("train", "validation", "test"):
        folder = root / split
        folder.mkdir(parents=True)
        for bin_id in range(target // bin_size):
            (folder / shard_file(0, bin_id)).touch()
        record = {"bin_size": bin_size, "bins": target // bin_size, "target_seq_length": target}
        (folder / BINS_FILE).write_text(json.dumps(record))
        folders.append(str(folder))
    return "[" + ",".join(folders) + "]"


@pytest.mark.parametrize("size", ["110m", "4b", "20b", "100b"])
def test_the_seeds_lddl_setting_dry_runs_as_the_seed_writes_it(size, launch):
    code, out, err = launch(["stages=[training]", f"training=bert/{size}", "check_inputs=true", *SEED_LDDL])
    assert code == 0, err
    assert [row[0] for row in plan_rows(out)] == ["training"]
    # The folders are not on this host: a dry run warns what a real run would refuse.
    assert "a real run would refuse training.model.data.data_prefix='/path/to/train/LDDL/Dataset/shard-*" in err


def test_bins_that_do_not_exist_are_refused_before_submitting(launch, tmp_path):
    results = tmp_path / "results"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n")
    overrides = [
        "stages=[training]",
        "training=bert/110m",
        "check_inputs=true",
        f"training.model.tokenizer.vocab_file={vocab}",
        *SEED_LDDL,
    ]
    code, out, err = launch(overrides, debug=False, results=results)
    _one_line_refusal(
        code,
        out,
        err,
        results,
        "training.model.data.data_prefix='/path/to/train/LDDL/Dataset/shard-*.parquet_*': nothing matches",
        "stages=[data_preparation,training]",
    )


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["training=gpt3/126m", "training.model.data.dataloader_type=LDDL"],
            ["training.model.data.dataloader_type='LDDL'", "BERT's", "use single or cyclic"],
        ),
        (
            ["training=t5/220m", "training.model.data.dataloader_type=LDDL"],
            ["training.model.data.dataloader_type='LDDL'", "BERT's", "use single or cyclic"],
        ),
        (  # the seed's snippet as written in a YAML file: under trainer
            ["training=bert/110m", f"+training.trainer.data.data_prefix={SEED_FOLDERS}"],
            ["training.trainer.data=", "live in model.data", "training.model.data.dataloader_type"],
        ),
        (
            ["training=bert/110m", "training.model.data.dataloader_type=LDDL"],
            ["training.model.data.data_prefix=None", "[train, validation, test]"],
        ),
        (
            ["training=bert/110m", *SEED_LDDL, "training.model.data.data_prefix=[1.0,/data/my-bert_00_text_sentence]"],
            ["training.model.data.data_prefix=[1.0, '/data/my-bert_00_text_sentence']", "three binned LDDL folders"],
        ),
    ],
)
def test_lddl_mistakes_are_refused_at_launch(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", *overrides], results=results)
    _one_line_refusal(code, out, err, results, *words)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["data_preparation.preprocess_data=True"],
            ["data_preparation.rm_extracted=True", "the lddl_bin step reads", "preprocess_data=False"],
        ),
        (
            ["data_preparation.tokenizer_type=BertWordPieceCase"],
            ["data_preparation.tokenizer_type='BertWordPieceCase'", "BertWordPieceLowerCase"],
        ),
        (["data_preparation.lddl.bin_size=100"], ["data_preparation.lddl.bin_size=100", "divide target_seq_length"]),
    ],
)
def test_lddl_data_preparation_mistakes_are_refused(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[data_preparation]", "data_preparation=bert/download_bert_pile_lddl", *overrides], results=results
    )
    _one_line_refusal(code, out, err, results, *words)


def test_the_lddl_data_preparation_plans_its_binning_as_an_array(launch):
    code, out, err = launch(["stages=[data_preparation]", "data_preparation=bert/download_bert_pile_lddl"])
    assert code == 0, err
    rows = plan_rows(out)
    assert [row[1].rsplit("_", 1)[-1] for row in rows] == ["download", "extract", "bin"], rows
    assert rows[-1][7] == "30" and rows[-1][3].startswith("aftercorr:"), rows[-1]  # one task per Pile shard


def test_a_bin_boundary_above_the_positions_is_refused(launch, tmp_path):
    folders = _binned(tmp_path / "lddl", target=1024, bin_size=128)
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[training]",
            "training=bert/110m",
            "training.model.data.dataloader_type=LDDL",
            f"training.model.data.data_prefix={folders}",
        ],
        results=results,
    )
    _one_line_refusal(code, out, err, results, "ends at 1024 tokens (8 bins of 128)", "model's 512 positions")


def test_bins_within_the_positions_pass(launch, tmp_path):
    folders = _binned(tmp_path / "lddl", target=512, bin_size=64)
    code, out, err = launch(
        [
            "stages=[training]",
            "training=bert/110m",
            "check_inputs=true",
            "training.model.data.dataloader_type=LDDL",
            f"training.model.data.data_prefix={folders}",
        ]
    )
    assert code == 0 and "Warning: a real run would refuse training.model.data" not in err, err


def test_a_pipelines_binning_past_the_positions_is_refused(launch, tmp_path):
    folders = (
        "[" + ",".join(f"${{data_dir}}/tiny_pile_bert/lddl/{split}" for split in ("train", "validation", "test")) + "]"
    )
    results = tmp_path / "results"
    base = [
        "stages=[data_preparation,training]",
        "data_preparation=bert/tiny_pile_lddl",
        "training=bert/tiny",
        "check_inputs=true",
        "training.model.data.dataloader_type=LDDL",
        f"training.model.data.data_prefix={folders}",
        f"data_dir={tmp_path / 'data'}",
    ]
    code, out, err = launch(base, results=tmp_path / "planned")
    assert code == 0, err
    steps = [row[1] for row in plan_rows(out)]
    assert steps[-2].endswith("tiny_pile_bert_lddl_lddl_bin") and steps[-1].endswith("bert_tiny"), steps
    code, out, err = launch(
        [*base, "training.model.max_position_embeddings=64", "training.model.encoder_seq_length=64"],
        results=results,
    )
    _one_line_refusal(code, out, err, results, "training.model.max_position_embeddings=64", "lddl.target_seq_length")
