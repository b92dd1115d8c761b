"""The tiny Mixtral (training=mixtral/tiny: 4 experts per layer, top-2 routing, EP 1) trained for real on the CPU
by the GPT program, as the launcher's script starts it: its loss falls and every progress line and validation
reports the experts' load balance (load_balancing_loss, 1.0 = an even spread, 4 = every token on one expert).

The tiny BPE corpus of the other GPT tests stands in for the family's tokenizer.json data (the tokenizer does not
matter to how experts route); everything else is the shipped config.
"""

import re

import pytest

from nemo_launcher.launch.stage_config import write_stage_config
from tests.jobs.gpt_train_support import FAST, run_training, step_losses
from tests.jobs.pipeline_support import TINY_VOCAB_DIVISOR, build_data

STEPS = 6


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("moe_data")
    build_data(data_dir)
    work = tmp_path_factory.mktemp("moe_run")
    config = write_stage_config(
        work / "cfg.yaml",
        "training",
        "mixtral/tiny",
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[
            *FAST,
            f"trainer.max_steps={STEPS}",
            "trainer.val_check_interval=3",
            f"model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}",
            "run.preprocessed_dir=${data_dir}/tiny_pile/preprocessed",
            "model.tokenizer.library=megatron",
            "model.tokenizer.type=GPT2BPETokenizer",
            "model.tokenizer.model=null",
            "model.tokenizer.vocab_file=${data_dir}/bpe/vocab.json",
            "model.tokenizer.merge_file=${data_dir}/bpe/merges.txt",
        ],
    )
    return run_training(config).stdout


def test_the_tiny_mixtral_trains_and_logs_its_load_balance(moe_run):
    steps = step_losses(moe_run)
    assert sorted(steps) == list(range(1, STEPS + 1)), moe_run[-3000:]
    for step, reported in steps.items():
        # E x sum_i f_i P_i lies between 1 (even) and E = 4 (one expert takes everything).
        assert 0.9 < reported["load_balancing_loss"] <= 4.0, (step, reported)
    assert steps[STEPS]["loss"] < steps[1]["loss"]
    validations = re.findall(r"^validation step=(\d+) val_loss=\S+ load_balancing_loss=([0-9.]+)$", moe_run, re.M)
    assert [int(step) for step, _ in validations] == [3, 6], moe_run[-3000:]
    assert all(0.9 < float(balance) <= 4.0 for _, balance in validations)
