"""Session fixtures shared by the RLHF job tests: the tiny preference set tokenized with the tiny BPE (the format of
contract/preference_data.py), and a tiny GPT supervised-fine-tuned on its prompts and responses (the policy and the
reference the reward model, PPO and DPO start from).

    from .rlhf_support import preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
"""

import json
from pathlib import Path

import pytest

from nemo_launcher.contract import preference_data as pd

from .sft_support import TINY_BPE_VOCAB, run_tuning, sft_section, tiny_nemo  # noqa: F401  (fixture)

# Comparisons per split of the tiny set, and PPO prompts per split.
PAIR_COUNTS = {"train": 256, "validation": 64, "test": 64}
PROMPT_COUNTS = {"train": 64, "validation": 16}
SEEDS = {"train": 1, "validation": 2, "test": 3}


def write_tiny_preferences(directory: Path, vocab_file: str, merge_file: str) -> Path:
    """The tiny set's pairs and prompts files tokenized with the given GPT-2-format BPE, plus metadata.json."""
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("megatron", "GPT2BPETokenizer", None, vocab_file, merge_file)
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in PAIR_COUNTS.items():
        with open(pd.pairs_file(str(directory), split), "w") as handle:
            for comparison in pd.tiny_comparisons(count, SEEDS[split]):
                prompt = tokenizer.encode(comparison.prompt)
                for chosen, rejected in comparison.pairs():
                    record = {
                        "prompt": prompt,
                        "chosen": tokenizer.encode(chosen) + [tokenizer.eod],
                        "rejected": tokenizer.encode(rejected) + [tokenizer.eod],
                    }
                    handle.write(json.dumps(record) + "\n")
    for split, count in PROMPT_COUNTS.items():
        with open(pd.prompts_file(str(directory), split), "w") as handle:
            for text in pd.tiny_prompts(count, SEEDS[split] + 10):
                handle.write(json.dumps({"prompt": tokenizer.encode(text), "text": text}) + "\n")
    (directory / pd.METADATA_FILE).write_text(
        json.dumps(
            {
                "tokenizer": {
                    "library": "megatron",
                    "type": "GPT2BPETokenizer",
                    "vocab_file": vocab_file,
                    "merge_file": merge_file,
                    "vocab_size": tokenizer.vocab_size,
                },
                "pairs": PAIR_COUNTS,
                "prompts": PROMPT_COUNTS,
                "rule": pd.RULE,
            },
            indent=1,
        )
    )
    return directory


@pytest.fixture(scope="session")
def preference_dir(tmp_path_factory, tiny_bpe_files):  # noqa: F811
    """The tiny preference set (train 256, validation 64, test 64 pairs; 64 and 16 prompts) as the RLHF jobs read it."""
    return write_tiny_preferences(tmp_path_factory.mktemp("preferences"), *tiny_bpe_files)


@pytest.fixture(scope="session")
def rlhf_sft_nemo(tmp_path_factory, tiny_nemo, preference_dir):  # noqa: F811
    """tiny_nemo fine-tuned (every weight, 48 steps of 16) on the tiny set's prompts with both kinds of response, so
    that it writes six-word answers from both lists: a policy that PPO and DPO can move towards the agreeable one."""
    from nemo_launcher.jobs.common.sample_data import tiny_bpe_files as repo_bpe
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    vocab, merges = (str(path) for path in repo_bpe())
    tokenizer = load_tokenizer("megatron", "GPT2BPETokenizer", None, vocab, merges)
    work = tmp_path_factory.mktemp("rlhf_sft")
    data = work / "sft.jsonl"
    with open(data, "w") as handle:
        for comparison in pd.tiny_comparisons(PAIR_COUNTS["train"], SEEDS["train"]):
            for response in comparison.responses:
                handle.write(json.dumps({"input": comparison.prompt, "output": response.strip()}) + "\n")
    assert tokenizer.vocab_size == TINY_BPE_VOCAB
    log_dir = work / "run"
    section = sft_section(tiny_nemo, str(data), str(log_dir))
    section["trainer"].update(max_steps=48, val_check_interval=48, log_every_n_steps=16)
    section["exp_manager"]["checkpoint_callback_params"]["every_n_train_steps"] = 48
    section["model"].update(global_batch_size=16, micro_batch_size=16, answer_only_loss=True)
    section["model"]["data"]["train_ds"]["prompt_template"] = "{input} {output}"
    section["model"]["data"]["validation_ds"]["prompt_template"] = "{input} {output}"
    run_tuning("finetune", section, log_dir)
    nemo = log_dir / "checkpoints" / "megatron_gpt_sft.nemo"
    assert nemo.is_file(), sorted(log_dir.rglob("*"))
    return str(nemo)
