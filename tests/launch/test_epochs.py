"""Stable Diffusion runs sized in passes over their shards (trainer.max_epochs), as seed 000's 860m_res_256 is: its
example command dry-runs clean; a run sized by both keys or by neither is refused at launch; and where the shards'
wdinfo.pkl is already on disk the launcher derives the steps and checks the schedule against them, as the job
does (tests/jobs/stable_diffusion/test_stable_diffusion_train.py trains and resumes such a run).

GPT keeps refusing max_epochs (tests/launch/test_refusals.py): its indexed datasets are built for a step count.
"""

import pickle

import pytest
import yaml

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.epochs import EpochSizing, wdinfo_examples

# Seed 000, "Example: Pre-train Stable Diffusion 860M Model for 10 Epochs with Resolution 256", verbatim.
SEED_COMMAND = "stages=[training] training=stable_diffusion/860m_res_256 training.trainer.max_epochs=10"
TINY = ["stages=[training]", "training=stable_diffusion/tiny", "cluster_type=interactive", "check_inputs=false"]


def _written_trainer(results):
    (config,) = results.rglob("*_hydra.yaml")
    return yaml.safe_load(config.read_text())["trainer"]


def test_the_seed_command_dry_runs_clean_sized_in_epochs(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(SEED_COMMAND.split(), results=results)
    assert code == 0, err
    assert not [line for line in err.splitlines() if line.startswith("Error")], err
    trainer = _written_trainer(results)
    assert (trainer["max_epochs"], trainer["max_steps"]) == (10, None)


def test_the_seed_config_is_sized_in_one_epoch(launch, tmp_path):
    results = tmp_path / "results"
    code, _, err = launch(["stages=[training]", "training=stable_diffusion/860m_res_256"], results=results)
    assert code == 0, err
    trainer = _written_trainer(results)
    assert (trainer["max_epochs"], trainer["max_steps"]) == (1, None)


@pytest.mark.parametrize(
    "base, overrides, words",
    [
        (
            SEED_COMMAND.split(),
            ["training.trainer.max_steps=100"],
            [
                "Error: training.trainer.max_epochs=10: training.trainer.max_steps=100 sizes the run too",
                "set training.trainer.max_steps=null to train 10 epochs, or training.trainer.max_epochs=null",
            ],
        ),
        (
            TINY,
            ["training.trainer.max_steps=null"],
            [
                "Error: training.trainer.max_steps=None: neither training.trainer.max_steps nor "
                "training.trainer.max_epochs sizes the run; set one of them",
            ],
        ),
        (TINY, ["training.trainer.max_steps=null", "training.trainer.max_epochs=0"], ["max_epochs=0", "positive"]),
    ],
    ids=["both", "neither", "zero-epochs"],
)
def test_a_run_sized_by_both_keys_or_neither_is_refused(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, _, err = launch(base + overrides, results=results)
    assert code == 2, err
    (line,) = err.strip().splitlines()
    for word in words:
        assert word in line, line
    assert not results.exists() or not any(results.rglob("*"))


def _listing(data_dir, tars: int, chunk: int, partial: int):
    """A generate_wdinfo listing of `tars` full tars and one partial one (the launcher reads the listing alone)."""
    folder = data_dir / "tiny_sd"
    folder.mkdir(parents=True)
    info = {"tar_files": [f"{i:05d}.tar" for i in range(tars)], "chunk_size": chunk, "total_key_count": 0}
    info["partial_tar_files"] = {f"{tars:05d}.tar": partial}
    (folder / "wdinfo.pkl").write_bytes(pickle.dumps(info))
    return folder / "wdinfo.pkl"


def test_the_launcher_counts_a_listed_data_set_and_checks_the_schedule(launch, tmp_path):
    # 2 x 40 + 16 = 96 examples at the tiny's global batch 16: one epoch is 6 steps, too few for 5 warm-up steps
    # and 3 constant ones; two epochs (12 steps) leave the cosine 4.
    _listing(tmp_path / "data", tars=2, chunk=40, partial=16)
    epochs = TINY + [f"data_dir={tmp_path / 'data'}", "training.trainer.max_steps=null"]
    constant = ["training.model.optim.sched.constant_steps=3"]
    code, _, err = launch(epochs + constant + ["training.trainer.max_epochs=1"], results=tmp_path / "refused")
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: training.model.optim.sched.warmup_steps=5: "), line
    assert "the run's max_epochs=1 over 96 samples at global batch 16 = 6 optimizer steps" in line, line
    assert line.endswith("or raise trainer.max_epochs"), line
    assert not (tmp_path / "refused").exists()
    code, _, err = launch(epochs + constant + ["training.trainer.max_epochs=2"], results=tmp_path / "accepted")
    assert code == 0, err


def test_the_launcher_refuses_a_listed_data_set_smaller_than_one_batch(launch, tmp_path):
    _listing(tmp_path / "data", tars=0, chunk=40, partial=7)
    code, _, err = launch(
        TINY + [f"data_dir={tmp_path / 'data'}", "training.trainer.max_steps=null", "training.trainer.max_epochs=2"],
        results=tmp_path / "results",
    )
    assert code == 2, err
    assert "training.model.data.train.dataset_path=7: max_epochs=2 over 7 samples at global batch 16 = 0" in err


def test_a_data_set_the_launcher_cannot_count_waits_for_the_job(launch, tmp_path):
    # A folder of tars (counting them means reading every tar's headers) and a missing listing: accepted at launch.
    (tmp_path / "tars").mkdir()
    code, _, err = launch(
        TINY
        + [
            f"training.model.data.train.dataset_path=[{tmp_path / 'tars'},{tmp_path / 'missing' / 'wdinfo.pkl'}]",
            "training.trainer.max_steps=null",
            "training.trainer.max_epochs=1",
            "training.model.optim.sched.warmup_steps=1000",
        ],
        results=tmp_path / "results",
    )
    assert code == 0, err


def test_epochs_make_whole_steps_and_a_listing_is_counted_from_its_file(tmp_path):
    sizing = EpochSizing(epochs=10, samples=1_000_000, global_batch_size=8192)
    assert sizing.max_steps == 1220  # 10,000,000 samples make 1220 full batches; the last 7,760 are dropped
    assert str(sizing) == "max_epochs=10 over 1000000 samples at global batch 8192 = 1220 optimizer steps"
    with pytest.raises(JobConfigError, match=r"^data=5: max_epochs=1 over 5 samples at global batch 8 = 0 optim"):
        EpochSizing(1, 5, 8).check("data")
    assert wdinfo_examples(str(_listing(tmp_path, tars=3, chunk=1000, partial=17))) == 3017
    (tmp_path / "broken.pkl").write_bytes(b"not a pickle")
    assert wdinfo_examples(str(tmp_path / "broken.pkl")) is None
    assert wdinfo_examples(str(tmp_path / "absent.pkl")) is None
