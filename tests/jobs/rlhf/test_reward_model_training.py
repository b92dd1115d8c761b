"""The rlhf_rm program (jobs/gpt/rlhf_rm.py) on the tiny preference set, from the tiny SFT model: held-out pairwise
accuracy, TP=2 against TP=1, exact resume after kill -9, and what it refuses.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_reward_model_training.py -q
"""

import re

import torch

from nemo_launcher.contract import preference_data as pd

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir, reward_run_output, rlhf_reward_nemo, rlhf_sft_nemo  # noqa: F401
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)


def _metrics(text: str, prefix: str) -> list[dict[str, float]]:
    """Every `<prefix> step=N key=value ...` line of a run's output, as {key: value}."""
    found = []
    for line in text.splitlines():
        if line.startswith(f"{prefix} step="):
            found.append({k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e+]+)", line)})
    return found


def _test_scores(path: str, data_dir) -> tuple[float, float]:
    """(share of the test pairs whose chosen response the scalar model at `path` scores higher, their mean
    Bradley-Terry loss); a plain GPT gets a fresh head, whose tiny scores give a loss near ln 2."""
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.rlhf.pairs import collate_pairs, read_pairs, split_pairs
    from nemo_launcher.jobs.rlhf.reward_model import last_token_scores, load_scalar_model

    model, tokenizer, _ = load_scalar_model(GPT, path, tp=1, precision="fp32", on_gpu=False)
    pairs = read_pairs(pd.pairs_file(str(data_dir), "test"), tokenizer.vocab_size, 64, "length")
    batch = collate_pairs(pairs, pad_id=tokenizer.eod)
    with torch.no_grad():
        chosen, rejected = split_pairs(last_token_scores(model, batch["tokens"], batch["lengths"]))
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean().item()
    return (chosen > rejected).float().mean().item(), loss


def test_the_tiny_reward_model_ranks_held_out_pairs_far_above_chance(rlhf_reward_nemo):  # noqa: F811
    output = reward_run_output(rlhf_reward_nemo)
    validations, tests = _metrics(output, "validation"), _metrics(output, "test")
    print("validation:", validations, "test:", tests)
    assert [v["step"] for v in validations] == [16, 32, 48]
    assert validations[0]["val_loss"] > validations[-1]["val_loss"]
    assert validations[-1]["accuracy"] >= 0.9 and tests[-1]["accuracy"] >= 0.9  # chance: 0.5
    assert validations[-1]["margin"] > 0 and tests[-1]["margin"] > 0
    assert f"val accuracy    {validations[-1]['accuracy']:.4f}" in output  # the closing summary
    assert f"test margin     {tests[-1]['margin']:.4f}" in output


def test_the_written_reward_model_scores_the_test_pairs_as_the_run_reported(
    rlhf_reward_nemo,  # noqa: F811
    rlhf_sft_nemo,  # noqa: F811
    preference_dir,  # noqa: F811
):
    trained, trained_loss = _test_scores(rlhf_reward_nemo, preference_dir)
    untrained, untrained_loss = _test_scores(rlhf_sft_nemo, preference_dir)  # the SFT model with a fresh head
    reported = _metrics(reward_run_output(rlhf_reward_nemo), "test")[-1]
    print(
        f"test pairs: trained accuracy {trained:.4f} loss {trained_loss:.4f} (the run reported {reported}); "
        f"fresh head accuracy {untrained:.4f} loss {untrained_loss:.4f}"
    )
    assert trained >= 0.9 and trained_loss < 0.4 and abs(untrained_loss - 0.6931) < 0.02
    # limit_test_batches 4 x 16 pairs = all 64 test pairs: the job's figures are these
    assert abs(trained - reported["accuracy"]) < 1e-6 and abs(trained_loss - reported["test_loss"]) < 1e-3


def _epoch_section(rlhf_sft_nemo, preference_dir, log_dir) -> dict:  # noqa: F811
    """One epoch over the 256 training pairs at global batch 32 (8 steps, sized by the job), every step logged."""
    from ..rlhf_support import rm_schedule, rm_section

    section = rm_section(rlhf_sft_nemo, preference_dir, log_dir)
    section["model"].update(global_batch_size=32, micro_batch_size=4)
    section["trainer"]["log_every_n_steps"] = 1
    section["model"]["optim"]["sched"]["warmup_steps"] = 2
    return rm_schedule(
        section,
        max_epochs=1,
        max_steps=-1,
        val_check_interval=4,
        save_interval=4,
        limit_val_batches=1,
        limit_test_batches=1,
    )


def _losses(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"^step=\d+/\d+ loss=([-\d.]+)", text, re.MULTILINE)]


def test_one_epoch_at_tp2_and_dp2_gives_tp1s_losses_and_a_resumed_run_tp1s_weights(
    tmp_path,
    rlhf_sft_nemo,  # noqa: F811
    preference_dir,  # noqa: F811
):
    from nemo_launcher.jobs.core.nemo_archive import load_nemo

    from ..sft_support import assert_same_tensors, rerun_after_kill_9, run_tuning

    whole = tmp_path / "tp1"
    tp1 = run_tuning("rlhf_rm", _epoch_section(rlhf_sft_nemo, preference_dir, whole), whole).stdout
    assert "max_epochs=1 over 256 samples at global batch 32 = 8 optimizer steps" in tp1, tp1[-3000:]
    split = tmp_path / "tp2"
    section = _epoch_section(rlhf_sft_nemo, preference_dir, split)
    section["model"]["tensor_model_parallel_size"] = 2
    section["trainer"]["devices"] = 2
    tp2 = run_tuning("rlhf_rm", section, split, processes=2).stdout
    data = tmp_path / "dp2"
    section = _epoch_section(rlhf_sft_nemo, preference_dir, data)
    section["trainer"]["devices"] = 2
    dp2 = run_tuning("rlhf_rm", section, data, processes=2).stdout
    ours, theirs, halves = _losses(tp1), _losses(tp2), _losses(dp2)
    print("TP=1 losses:", ours, "\nTP=2 losses:", theirs, "\nDP=2 losses:", halves)
    assert len(ours) == 8 and len(theirs) == 8 and len(halves) == 8 and ours[-1] < ours[0]
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-3
    assert max(abs(a - b) for a, b in zip(ours, halves)) < 1e-3  # each rank half of every global batch

    killed = tmp_path / "killed"
    section = _epoch_section(rlhf_sft_nemo, preference_dir, killed)
    result = str(killed / "checkpoints" / "megatron_gpt.nemo")
    resumed = rerun_after_kill_9("rlhf_rm", section, killed, kill_after=4, result=result)
    assert _losses(resumed) == ours[4:]
    _, expected = load_nemo(whole / "checkpoints" / "megatron_gpt.nemo")
    _, got = load_nemo(result)
    assert_same_tensors(got, expected)
    # the TP=2 archive holds two shards; merged, it is the TP=1 model up to float rounding
    config, merged = load_nemo(split / "checkpoints" / "megatron_gpt.nemo", shard_layout=_reward_layout())
    assert config["tensor_model_parallel_size"] == 2 and config["reward_model"] == {"head": "scalar"}
    assert_same_tensors(merged, expected, atol=1e-4)


def _reward_layout():
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.rlhf.reward_model import scalar_shard_layout

    return scalar_shard_layout(GPT)
