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
    """The tiny set's pairs, prompts and SFT files tokenized with the given GPT-2-format BPE, plus metadata.json, as
    data_preparation=rlhf/tiny_preferences writes them (its program, without the pre-training corpus)."""
    from nemo_launcher.contract.schemas.preference_preparation import PreferencePreparation
    from nemo_launcher.jobs.data.preference_tiny import write_tiny_set

    section = {
        "run": {"name": "tiny_preferences", "results_dir": str(directory), "time_limit": "0:15:00"},
        "dataset": "tiny_preferences",
        "output_dir": str(directory),
        "tokenizer": {
            "library": "megatron",
            "type": "GPT2BPETokenizer",
            "vocab_file": vocab_file,
            "merge_file": merge_file,
        },
        "comparisons": PAIR_COUNTS,
        "prompts": PROMPT_COUNTS,
        "seed": SEEDS["train"],
        "corpus_comparisons": 0,
    }
    cfg = PreferencePreparation.from_dict(section)
    # The program draws split i with seed+i and its prompts with seed+10+i: the seeds the other tests were written for.
    assert {split: cfg.split_seed(split) for split in SEEDS} == SEEDS
    assert {split: cfg.prompt_seed(split) for split in PROMPT_COUNTS} == {s: SEEDS[s] + 10 for s in PROMPT_COUNTS}
    write_tiny_set(cfg)
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


REPO_CONF = Path(__file__).resolve().parents[2] / "conf"


def rm_section(sft_nemo: str, data_dir, log_dir, config: str = "tiny") -> dict:
    """The resolved `rlhf_rm` section of conf/rlhf_rm/gpt3/<config>.yaml (on its family file, as Hydra composes it),
    starting from `sft_nemo`, reading the pairs of `data_dir` and writing into `log_dir`."""
    from omegaconf import OmegaConf

    def layer(path: Path):
        loaded = OmegaConf.load(path)
        return OmegaConf.create({key: value for key, value in loaded.items() if key != "defaults"})

    section = OmegaConf.merge(
        layer(REPO_CONF / "_family" / "gpt3_rm.yaml"), layer(REPO_CONF / "rlhf_rm" / "gpt3" / f"{config}.yaml")
    )
    root = OmegaConf.create(
        {"base_results_dir": str(log_dir), "data_dir": str(data_dir), "cluster": {"gpus_per_node": 1}}
    )
    root.rlhf_rm = section
    resolved = OmegaConf.to_container(root, resolve=True)["rlhf_rm"]
    resolved["model"]["pretrained_checkpoint"]["restore_from_path"] = sft_nemo
    resolved["model"]["data"]["data_prefix"] = {
        split: [pd.pairs_file(str(data_dir), split)] for split in ("train", "validation", "test")
    }
    resolved["exp_manager"]["explicit_log_dir"] = str(log_dir)
    return resolved


def rm_schedule(section: dict, **rm) -> dict:
    """`section` (an rm_section) with trainer.rm values replaced and the keys that follow them too, as Hydra would
    resolve them (trainer.<key>, or the checkpoint interval for save_interval)."""
    for key, value in rm.items():
        section["trainer"]["rm"][key] = value
        if key == "save_interval":
            section["exp_manager"]["checkpoint_callback_params"]["every_n_train_steps"] = value
        else:
            section["trainer"][key] = value
    return section


def reward_run_output(reward_nemo: str) -> str:
    """The stdout of the rlhf_rm run that wrote `reward_nemo` (the rlhf_reward_nemo fixture keeps it beside)."""
    return (Path(reward_nemo).parents[1] / "rlhf_rm.stdout").read_text()


@pytest.fixture(scope="session")
def rlhf_reward_nemo(tmp_path_factory, rlhf_sft_nemo, preference_dir):
    """The tiny reward model: conf/rlhf_rm/gpt3/tiny.yaml from rlhf_sft_nemo on the tiny set (48 steps of 16 pairs);
    returns its .nemo path (a scalar-head GPT, jobs/rlhf/reward_model.py). The run's stdout: reward_run_output()."""
    log_dir = tmp_path_factory.mktemp("rlhf_rm") / "run"
    section = rm_section(rlhf_sft_nemo, preference_dir, log_dir)
    result = run_tuning("rlhf_rm", section, log_dir)
    nemo = log_dir / "checkpoints" / "megatron_gpt.nemo"
    assert nemo.is_file(), result.stdout[-3000:]
    (log_dir / "rlhf_rm.stdout").write_text(result.stdout)
    return str(nemo)
