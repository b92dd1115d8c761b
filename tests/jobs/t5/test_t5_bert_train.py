"""The T5 and BERT training programs, run for real on the CPU as the launcher's scripts run them
(python3 -m nemo_launcher.jobs.{t5,bert}.train, torchrun for 2 processes), on what their tiny data preparation
writes: the loss falls, a rerun after kill -9 ends bit-identical to an uninterrupted run, TP=2 gives TP=1's losses,
and BERT trains with PP=2 (megatron-core 0.16 cannot split a T5 over pipeline stages: the launch refuses it,
tests/launch/test_family_refusals.py)."""

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_module
from tests.jobs.gpt_train_support import REPO, command, environment, losses, run_training, weights

FAMILIES = {  # family -> (data preparation config, training config, run name)
    "t5": ("t5/tiny_pile", "t5/tiny", "t5_tiny"),
    "bert": ("bert/tiny_pile", "bert/tiny", "bert_tiny"),
}
# 8 steps saving at 4 and 8, short samples. The vocabulary is padded to a multiple of make_vocab_size_divisible_by
# x TP: 256 x 1 here and 128 x 2 in the TP=2 run give the same table, so both runs start from the same weights.
RUN = [
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "exp_manager.checkpoint_callback_params.every_n_train_steps=4",
    "model.make_vocab_size_divisible_by=256",
    "model.optim.sched.warmup_steps=2",
]
SHORT = {
    "t5": ["model.encoder_seq_length=64", "model.max_position_embeddings=64", "model.data.seq_length_dec=32"],
    "bert": ["model.encoder_seq_length=64", "model.max_position_embeddings=64"],
}


def _program(family):
    return (f"nemo_launcher.jobs.{family}.train",)


def _config(family, work: Path, data_dir: Path, overrides=(), name="cfg.yaml") -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / name,
        "training",
        FAMILIES[family][1],
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[*SHORT[family], *RUN, *overrides],
    )


def _checkpoints(family, work: Path) -> Path:
    return work / "results" / FAMILIES[family][2] / "results" / "checkpoints"


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_data(request, tiny_data):
    """(family, data_dir): the family's tiny data preparation run by the launcher on this machine."""
    require_module("megatron.core")
    family = request.param
    return family, tiny_data(FAMILIES[family][0])


@pytest.fixture(scope="module")
def baseline(family_data, tmp_path_factory):
    """The uninterrupted single-process run: (family, data_dir, work dir, progress output)."""
    family, data_dir = family_data
    work = tmp_path_factory.mktemp(f"{family}_baseline")
    result = run_training(_config(family, work, data_dir), program=_program(family))
    return family, data_dir, work, result.stdout


def test_loss_falls_and_both_checkpoints_are_complete(baseline):
    family, _, work, stdout = baseline
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 9)), stdout[-2000:]
    assert sum(curve[s] for s in (6, 7, 8)) / 3 < sum(curve[s] for s in (1, 2, 3)) / 3 - 0.15, curve
    assert "validation step=4 val_loss=" in stdout and "test step=8 test_loss=" in stdout
    checkpoints = _checkpoints(family, work)
    assert all((checkpoints / name / "COMPLETE").is_file() for name in ("step-4", "step-8"))
    if family == "bert":  # masked LM and sentence order are both reported
        assert " lm_loss=" in stdout and " sop_loss=" in stdout


def test_rerun_after_kill_9_ends_with_identical_weights(baseline, tmp_path):
    family, data_dir, reference, reference_out = baseline
    config = _config(family, tmp_path, data_dir)
    marker = _checkpoints(family, tmp_path) / "step-4" / "COMPLETE"
    process = _start(family, config, tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint at step 4 in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing of ours runs after this
    finally:
        process.wait()
    assert not (_checkpoints(family, tmp_path) / "step-8" / "COMPLETE").exists(), "killed too late to test a resume"

    resumed = run_training(config, program=_program(family))
    assert "resuming from" in resumed.stdout and "step-4" in resumed.stdout
    curve = losses(resumed.stdout)
    assert min(curve) == 5 and curve == {s: v for s, v in losses(reference_out).items() if s >= 5}
    ours = weights(_checkpoints(family, tmp_path) / "step-8", tmp_path)
    theirs = weights(_checkpoints(family, reference) / "step-8", tmp_path)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def _start(family, config, tmp_path):
    """The program in the background, its output in killed.log."""
    handle = open(tmp_path / "killed.log", "w")
    return subprocess.Popen(
        command(config, program=_program(family), warm=False),
        cwd=REPO,
        env=environment(),
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_tensor_parallel_2_gives_the_losses_of_tp_1(baseline, tmp_path):
    family, data_dir, _, reference_out = baseline
    config = _config(
        family,
        tmp_path,
        data_dir,
        ["trainer.devices=2", "model.tensor_model_parallel_size=2", "model.make_vocab_size_divisible_by=128"],
    )
    tp2 = run_training(config, processes=2, program=_program(family))
    assert "TP=2 PP=1" in tp2.stdout
    assert losses(tp2.stdout) == pytest.approx(losses(reference_out), abs=2e-4)


def test_bert_trains_over_two_pipeline_stages(family_data, tmp_path):
    family, data_dir = family_data
    if family != "bert":
        return  # T5: refused at launch (megatron-core 0.16 has no T5 pipeline split)
    config = _config(
        family, tmp_path, data_dir, ["trainer.max_steps=4", "trainer.devices=2", "model.pipeline_model_parallel_size=2"]
    )
    result = run_training(config, processes=2, program=_program(family))
    assert "TP=1 PP=2" in result.stdout
    curve = losses(result.stdout)
    assert sorted(curve) == [1, 2, 3, 4] and curve[4] < curve[1], curve
    assert (_checkpoints(family, tmp_path) / "step-4" / "COMPLETE").is_file()
