"""The tiny BERT LDDL pipeline on the CPU, as a user runs it: `data_preparation=bert/tiny_pile_lddl` (the launcher,
here), then `training=bert/tiny` with dataloader_type LDDL and conversion to a .nemo.

- the binning writes LDDL's layout (bins 0.. of every shard in each split folder, LDDL's columns, lower-case pieces)
  and a rerun redoes only an incomplete shard, writing the same rows;
- the loader: every micro-batch of every rank comes from one bin and is cut to that bin's length, the ranks of a
  step read different pairs, and no pair comes twice in a pass;
- training falls in loss and converts, trains over two pipeline stages, and, killed with SIGKILL after its step-4
  checkpoint, a rerun ends with weights bit-identical to an uninterrupted run.
"""

import dataclasses
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_module

pq = require_module("pyarrow.parquet")
require_module("megatron.core")

from nemo_launcher.contract.lddl import SPLITS, bins_on_disk, shard_marker  # noqa: E402
from nemo_launcher.contract.schemas.bert_training import BertTrainingConfig  # noqa: E402
from tests.jobs.gpt_train_support import command, environment, losses, weights  # noqa: E402
from tests.jobs.pipeline_support import REPO, plan_pipeline, run_job  # noqa: E402

TRAIN, CONVERT = "nemo_launcher.jobs.bert.train", "nemo_launcher.jobs.bert.convert"
SHARDS, BINS = (0, 1, 2), 4  # bert/tiny_pile_lddl: three tiny Pile shards, 128 tokens in bins of 32
FOLDERS = "[" + ",".join(f"${{data_dir}}/tiny_pile_bert/lddl/{split}" for split in SPLITS) + "]"
LDDL = ["training.model.data.dataloader_type=LDDL", f"training.model.data.data_prefix={FOLDERS}"]
RUN = [
    "training.trainer.max_steps=8",
    "training.trainer.val_check_interval=4",
    "training.trainer.log_every_n_steps=1",
    "training.trainer.limit_val_batches=1",
    "training.trainer.limit_test_batches=1",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=4",
    "training.model.optim.sched.warmup_steps=2",
]


@pytest.fixture(scope="module")
def lddl_data(tiny_data):
    """The data_dir `data_preparation=bert/tiny_pile_lddl` filled (download, extract, train_tokenizer, lddl_bin)."""
    return tiny_data("bert/tiny_pile_lddl")


def _plan(work, data_dir, stages="[training]"):
    overrides = [f"stages={stages}", "training=bert/tiny", "conversion=bert/convert_bert", *LDDL, *RUN]
    return plan_pipeline(work, overrides, data_dir)


@pytest.fixture(scope="module")
def baseline(lddl_data, tmp_path_factory):
    """Training (8 steps, checkpoints at 4 and 8) and conversion, uninterrupted: (planned run, training output)."""
    run = _plan(tmp_path_factory.mktemp("lddl_baseline"), lddl_data, "[training,conversion]")
    trained = run_job(run.configs["training"], TRAIN)
    run_job(run.configs["conversion"], CONVERT)
    return run, trained.stdout


def _checkpoints(run):
    return run.base_results_dir / "bert_tiny" / "results" / "checkpoints"


def test_binning_writes_lddl_layout(lddl_data):
    vocab = set((lddl_data / "tiny_pile_bert" / "bpe" / "vocab.txt").read_text().split("\n"))
    output = lddl_data / "tiny_pile_bert" / "lddl"
    for split in SPLITS:
        found = bins_on_disk(str(output / split))
        assert sorted(found) == list(range(BINS)) and all(len(files) == len(SHARDS) for files in found.values())
        for bin_id, files in found.items():
            table = pq.read_table(files)
            assert table.column_names == ["A", "B", "is_random_next", "num_tokens", "bin_id"]
            for row in table.to_pylist():
                pieces = row["A"].split() + row["B"].split()
                assert row["bin_id"] == bin_id and bin_id * 32 < row["num_tokens"] <= (bin_id + 1) * 32
                assert row["num_tokens"] == len(pieces) + 3 and set(pieces) <= vocab
                assert all(p == p.lower() for p in pieces), pieces  # lower-case WordPiece
    assert all((output / f".shard-{n}.done.json").is_file() for n in SHARDS)


def test_a_rerun_redoes_only_the_incomplete_shard_with_the_same_rows(lddl_data, tmp_path):
    from nemo_launcher.jobs.data.lddl_bin import main

    config = yaml.safe_load(next((lddl_data.parent / "results").glob("*/*_hydra.yaml")).read_text())
    config["lddl"]["output_dir"] = str(tmp_path / "lddl")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    first = main(["--config", str(path)])
    assert first.finished == ["0", "1", "2"]
    # Shard 1 as a killed task leaves it: its marker never written, one of its files not yet renamed into place.
    (tmp_path / "lddl" / "validation" / "shard-1.parquet_3").unlink()
    Path(shard_marker(str(tmp_path / "lddl"), 1)).unlink()
    again = main(["--config", str(path)])
    assert again.finished == ["1"] and again.complete_before == ["0", "2"]
    for split in SPLITS:
        for bin_id in range(BINS):
            name = f"{split}/shard-1.parquet_{bin_id}"
            ours = pq.read_table(tmp_path / "lddl" / name)
            assert ours.equals(pq.read_table(lddl_data / "tiny_pile_bert" / "lddl" / name)), name


def _bound(lddl_data, tmp_path):
    from nemo_launcher.launch.stage_config import write_stage_config

    path = write_stage_config(
        tmp_path / "cfg.yaml",
        "training",
        "bert/tiny",
        data_dir=lddl_data,
        base_results_dir=tmp_path / "results",
        overrides=[o.removeprefix("training.") for o in LDDL] + ["model.global_batch_size=16"],
    )
    return BertTrainingConfig.from_dict(yaml.safe_load(path.read_text()))


def test_every_micro_batch_is_one_bin_and_no_pair_comes_twice_in_a_pass(lddl_data, tmp_path):
    import torch

    from nemo_launcher.jobs.bert.lddl_data import LddlPairs, _masking, lddl_microbatches
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer
    from nemo_launcher.jobs.core.samplers import StepBatchSampler
    from nemo_launcher.jobs.core.schedule import BatchSchedule

    cfg = _bound(lddl_data, tmp_path)
    tokenizer = load_tokenizer(**dataclasses.asdict(cfg.model.tokenizer))
    train_folder = cfg.model.data.lddl_folders()[0]
    probe = LddlPairs(train_folder, 1, cfg, tokenizer, _masking(cfg, tokenizer))
    steps = 3 * probe.pass_length // 16  # three passes of 16-sample steps over two data-parallel ranks
    dataset = LddlPairs(train_folder, steps * 16, cfg, tokenizer, _masking(cfg, tokenizer))
    schedule = BatchSchedule(16, 4, 2)
    ranks = [list(StepBatchSampler(len(dataset), schedule, steps, lambda: 0, dp_rank=r)) for r in (0, 1)]
    seen: dict[int, set] = {}
    for step in range(steps):
        step_pairs = []
        for rank in ranks:
            for first in range(0, 8, 4):
                blocks = [dataset.locate(i) for i in rank[step][first : first + 4]]
                assert len({bin_id for bin_id, _ in blocks}) == 1, blocks  # one bin per micro-batch
                step_pairs += blocks
        assert len(set(step_pairs)) == 16  # the two ranks read different pairs
        for index in (i for rank in ranks for i in rank[step]):
            pass_pairs = seen.setdefault(index // dataset.pass_length, set())
            assert dataset.locate(index) not in pass_pairs, index  # no pair twice in a pass
            pass_pairs.add(dataset.locate(index))
    assert all(len(pairs) == dataset.pass_length for pairs in seen.values()) and len(seen) == 3

    batch = torch.utils.data.default_collate([dataset[i] for i in ranks[1][0]])
    for micro in lddl_microbatches(batch, 4):
        length = micro["text"].shape[1]
        assert length in (32, 64, 96, 128) and micro["padding_mask"].sum(1).max() <= length
        assert (micro["text"][:, 0] == tokenizer.cls).all() and micro["loss_mask"].sum() > 0
        assert (micro["labels"][micro["loss_mask"] == 0] == -1).all()
    assert all((dataset[5][k] == dataset[5][k]).all() for k in ("text", "labels"))  # masking is a function of n


def test_training_learns_and_converts(baseline):
    run, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 9)) and curve[8] < curve[1], curve
    assert "data: LDDL bins: " in stdout and " sop_loss=" in stdout
    assert (run.base_results_dir / "bert_tiny" / "convert_nemo" / "results" / "megatron_bert.nemo").is_file()


def test_training_runs_over_two_pipeline_stages(lddl_data, tmp_path):
    """Micro-batches of different lengths cross the stage boundary: the stages exchange each one's shape first
    (with the schedule's fixed shape the receiving stage would expect 128 tokens where a bin sends 32)."""
    overrides = ["training.trainer.devices=2", "training.model.pipeline_model_parallel_size=2"]
    run = plan_pipeline(tmp_path, ["stages=[training]", "training=bert/tiny", *LDDL, *RUN, *overrides], lddl_data)
    result = run_job(run.configs["training"], TRAIN, processes=2)
    assert "TP=1 PP=2" in result.stdout
    curve = losses(result.stdout)
    assert sorted(curve) == list(range(1, 9)) and curve[8] < curve[1], curve


def test_rerun_after_kill_9_ends_with_identical_weights(baseline, lddl_data, tmp_path):
    reference, reference_out = baseline
    run = _plan(tmp_path, lddl_data)
    marker = _checkpoints(run) / "step-4" / "COMPLETE"
    with open(tmp_path / "killed.log", "w") as log:
        process = _start(run.configs["training"], log)
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint at step 4 in time"
                time.sleep(0.02)
            process.kill()  # SIGKILL: nothing of ours runs after this
        finally:
            process.wait()
    assert not (_checkpoints(run) / "step-8" / "COMPLETE").exists(), "killed too late to test a resume"
    resumed = run_job(run.configs["training"], TRAIN).stdout
    assert "resuming from" in resumed and "step-4" in resumed
    curve = losses(resumed)
    assert min(curve) == 5 and curve == {s: v for s, v in losses(reference_out).items() if s >= 5}
    ours = weights(_checkpoints(run) / "step-8", tmp_path)
    theirs = weights(_checkpoints(reference) / "step-8", tmp_path)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def _start(config, log):
    return subprocess.Popen(
        command(config, program=(TRAIN,), warm=False),
        cwd=REPO,
        env=environment(),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
