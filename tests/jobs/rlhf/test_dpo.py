"""DPO through its two programs on the tiny SFT policy and the tiny preference set (CPU): the reference job's
log-probs, the first loss at ln 2, held-out preference accuracy, exact resume after kill -9, the tuned policy .nemo.

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_dpo.py -q
"""

import json
import math
import re
import time

import pytest

from nemo_launcher.contract import preference_data as pd

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..gpt_train_support import losses, step_losses
from ..rlhf_support import PAIR_COUNTS, preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..sft_support import start_tuning, tiny_nemo  # noqa: F401  (fixture)
from .dpo_support import dpo_section, run_dpo, validation_figures

POLICY = "megatron_gpt_dpo.nemo"


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory, rlhf_sft_nemo, preference_dir):  # noqa: F811
    """The reference job's output for the tiny SFT policy (TP 1), and its log."""
    work = tmp_path_factory.mktemp("dpo_reference")
    section = dpo_section(rlhf_sft_nemo, preference_dir, work / "run", work / "reference")
    return work / "reference", run_dpo("rlhf_dpo_reference", section, work).stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory, rlhf_sft_nemo, preference_dir, reference_dir):  # noqa: F811
    """A whole DPO run of every weight: (its folder, its output)."""
    work = tmp_path_factory.mktemp("dpo")
    section = dpo_section(rlhf_sft_nemo, preference_dir, work, reference_dir[0])
    return work, run_dpo("rlhf_dpo", section, work).stdout


def test_reference_copies_carry_the_summed_response_log_probs(reference_dir, preference_dir):  # noqa: F811
    folder, stdout = reference_dir
    for split in ("train", "validation"):
        source = pd.pairs_file(str(preference_dir), split)
        copy = pd.pairs_file(str(folder), split)
        originals = [json.loads(line) for line in open(source)]
        copies = [json.loads(line) for line in open(copy)]
        assert len(copies) == len(originals) == PAIR_COUNTS[split]
        for original, line in zip(originals, copies):
            assert {k: line[k] for k in original} == original  # the pair itself, unchanged
            # a log-prob of each response token, so below 0 and above the uniform guess over 2,048 tokens
            for field, response in (("ref_chosen", "chosen"), ("ref_rejected", "rejected")):
                assert -math.log(2048) * len(line[response]) < line[field] < 0, (field, line)
        assert f"reference {split}: {PAIR_COUNTS[split]} pairs -> {copy}" in stdout


def test_first_step_loss_is_ln_2_and_held_out_accuracy_reaches_90_percent(trained):
    work, stdout = trained
    first = step_losses(stdout)[1]
    # the policy starts as the reference: every implicit reward is 0, the loss -log sigmoid(0)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4), first
    figures = validation_figures(stdout)
    assert sorted(figures) == [16, 32], stdout[-3000:]
    last = figures[32]
    print(
        f"held-out preference accuracy {figures[16]['preference_accuracy']:.4f} at step 16, "
        f"{last['preference_accuracy']:.4f} at step 32 (chance 0.5); margin {last['reward_margin']:.4f}"
    )
    assert last["preference_accuracy"] >= 0.9
    assert last["reward_margin"] > 0 and last["chosen_reward"] > last["rejected_reward"]
    assert (work / "checkpoints" / POLICY).is_file()
    assert re.search(rf"^  DPO policy +{re.escape(str(work / 'checkpoints' / POLICY))}$", stdout, re.M), stdout[-2000:]


def _largest_difference(ours: dict[int, float], theirs: dict[int, float]) -> float:
    assert ours.keys() == theirs.keys()
    return max(abs(ours[step] - theirs[step]) for step in ours)


def _policy_weights(path):
    from nemo_launcher.jobs.gpt.inference import load_gpt_nemo

    return load_gpt_nemo(path)[1]


def test_rerun_after_kill_9_continues_bit_identically(trained, rlhf_sft_nemo, preference_dir, reference_dir, tmp_path):  # noqa: F811
    work, stdout = trained
    section = dpo_section(rlhf_sft_nemo, preference_dir, tmp_path, reference_dir[0])
    marker = tmp_path / "checkpoints" / "step-8" / "COMPLETE"
    process = start_tuning("rlhf_dpo", section, tmp_path, tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint at step 8 in time"
            time.sleep(0.01)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    assert not (tmp_path / "checkpoints" / "step-32" / "COMPLETE").exists(), "killed too late to test a resume"
    resumed = run_dpo("rlhf_dpo", section, tmp_path).stdout
    assert "resuming from " in resumed
    first = min(losses(resumed))
    assert first > 1
    # every figure of every later step, bit for bit (as printed), and the same validation
    expected = {step: figures for step, figures in step_losses(stdout).items() if step >= first}
    assert step_losses(resumed) == expected
    assert validation_figures(resumed)[32] == validation_figures(stdout)[32]
    ours, theirs = _policy_weights(tmp_path / "checkpoints" / POLICY), _policy_weights(work / "checkpoints" / POLICY)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key].equal(theirs[key]), key


def test_tensor_parallel_2_gives_tensor_parallel_1s_reference_and_losses(
    trained,
    rlhf_sft_nemo,
    preference_dir,
    reference_dir,
    tmp_path,  # noqa: F811
):
    """The reference job and the trainer under torchrun with TP=2 (the TP=1 SFT archive resharded on load): the
    vocab-parallel cross entropy gives every rank the full log-probs, so the results match TP=1's."""
    section = dpo_section(
        rlhf_sft_nemo, preference_dir, tmp_path / "run", tmp_path / "reference", tensor_model_parallel_size=2
    )
    section["trainer"]["devices"] = 2
    reference = run_dpo("rlhf_dpo_reference", section, tmp_path, processes=2).stdout
    assert "TP=2" in reference
    for split in ("train", "validation"):
        ones = [json.loads(line) for line in open(pd.pairs_file(str(reference_dir[0]), split))]
        twos = [json.loads(line) for line in open(pd.pairs_file(str(tmp_path / "reference"), split))]
        for one, two in zip(ones, twos, strict=True):
            assert two["ref_chosen"] == pytest.approx(one["ref_chosen"], abs=1e-4)
            assert two["ref_rejected"] == pytest.approx(one["ref_rejected"], abs=1e-4)
    two = run_dpo("rlhf_dpo", section, tmp_path / "run", processes=2).stdout
    assert "TP=2 PP=1" in two
    _, one = trained
    print(f"TP 2 against TP 1: largest loss difference {_largest_difference(losses(two), losses(one)):.2e}")
    assert losses(two) == pytest.approx(losses(one), abs=1e-3)
    assert validation_figures(two)[32]["preference_accuracy"] == validation_figures(one)[32]["preference_accuracy"]


def test_lora_dpo_trains_adapters_on_the_frozen_base_and_writes_the_merged_policy(
    rlhf_sft_nemo,
    preference_dir,
    reference_dir,
    tmp_path,  # noqa: F811
):
    from nemo_launcher.jobs.tuning.lora_file import load_adapter_file

    lora = {"adapter_dim": 8, "alpha": 16, "adapter_dropout": 0.0, "target_modules": ["all"]}
    section = dpo_section(
        rlhf_sft_nemo,
        preference_dir,
        tmp_path,
        reference_dir[0],  # the base's log-probs: LoRA-DPO's reference is the base with the adapters off
        peft={"peft_scheme": "lora", "merge": True, "lora_tuning": lora},
    )
    # LoRA alone drifts both responses' likelihood down on this tiny model (held-out accuracy 0.78-0.86 at lr 1e-3 to
    # 1e-2); the SFT term on the chosen response (weight 0.2) holds it near the SFT model: 0.906 at step 32
    section["model"]["optim"]["lr"] = 3.0e-3
    section["model"]["dpo"]["sft_loss_weight"] = 0.2
    stdout = run_dpo("rlhf_dpo", section, tmp_path).stdout
    assert "LoRA r=8 alpha=16" in stdout
    first = step_losses(stdout)[1]  # B = 0: the policy is the base, the reference
    assert first["preference_loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert first["loss"] == pytest.approx(first["preference_loss"] + 0.2 * first["sft_loss"], abs=1e-3)
    last = validation_figures(stdout)[32]
    print(f"LoRA-DPO held-out preference accuracy {last['preference_accuracy']:.4f} (chance 0.5)")
    assert last["preference_accuracy"] >= 0.85 and last["preference_loss"] < math.log(2) - 0.01
    settings, adapters = load_adapter_file(tmp_path / "checkpoints" / "megatron_gpt_dpo_lora.nemo")
    assert settings["adapter_dim"] == 8 and any(value.abs().sum() > 0 for value in adapters.values())
    merged, base = _policy_weights(tmp_path / "checkpoints" / POLICY), _policy_weights(rlhf_sft_nemo)
    assert merged.keys() == base.keys()  # a plain GPT .nemo: no adapter tensors left
    changed = [key for key in base if not merged[key].equal(base[key])]
    assert changed and all("linear" in key for key in changed), changed


def test_two_data_parallel_ranks_give_one_rank_s_losses(
    trained, rlhf_sft_nemo, preference_dir, reference_dir, tmp_path
):  # noqa: F811
    """DP 2: each rank takes half of every step's pairs (whole pairs: the micro-batch split keeps a chosen row with its
    rejected one) and megatron averages the gradients, so the run follows the one-process run."""
    section = dpo_section(rlhf_sft_nemo, preference_dir, tmp_path, reference_dir[0])
    section["trainer"]["devices"] = 2
    two = run_dpo("rlhf_dpo", section, tmp_path, processes=2).stdout
    assert "TP=1 PP=1 VPP=1 DP=2" in two
    _, one = trained
    print(f"DP 2 against DP 1: largest loss difference {_largest_difference(losses(two), losses(one)):.2e}")
    assert losses(two) == pytest.approx(losses(one), abs=1e-3)
    assert validation_figures(two)[32]["preference_accuracy"] == validation_figures(one)[32]["preference_accuracy"]
