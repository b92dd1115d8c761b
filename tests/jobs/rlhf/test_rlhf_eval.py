"""rlhf_eval (jobs/gpt/rlhf_eval.py, jobs/rlhf/evaluation.py): the tiny SFT policy scored by the tiny reward model.

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_rlhf_eval.py -q
"""

import json
from pathlib import Path

import pytest
import torch

from nemo_launcher.contract import preference_data as pd
from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.rlhf_eval import RlhfEvalConfig

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir, rlhf_reward_nemo, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..sft_support import run_tuning, tiny_nemo  # noqa: F401  (fixture)

CONF = Path(__file__).resolve().parents[3] / "conf"


def eval_section(policy: str, reward: str, reference: str | None, data_dir, log_dir) -> dict:
    """conf/rlhf_eval/gpt3/tiny.yaml resolved as Hydra would, for these models, data and results folder."""
    from omegaconf import OmegaConf

    root = OmegaConf.create({"base_results_dir": str(log_dir), "data_dir": str(data_dir)})
    root.rlhf_eval = OmegaConf.load(CONF / "rlhf_eval" / "gpt3" / "tiny.yaml")
    section = OmegaConf.to_container(root, resolve=True)["rlhf_eval"]
    section["model"].update(policy_path=policy, reward_model_path=reward, reference_path=reference)
    section["model"]["data"].update(
        prompts_file=pd.prompts_file(str(data_dir), "validation"), pairs_file=pd.pairs_file(str(data_dir), "test")
    )
    section["exp_manager"]["explicit_log_dir"] = str(log_dir)
    return section


def test_the_shipped_config_binds_and_names_what_it_reads():
    section = RlhfEvalConfig.from_dict(eval_section("/p.nemo", "/rm.nemo", "/sft.nemo", "/data", "/results"))
    assert section.reads() == [
        ("rlhf_eval.model.policy_path", "/p.nemo"),
        ("rlhf_eval.model.reward_model_path", "/rm.nemo"),
        ("rlhf_eval.model.reference_path", "/sft.nemo"),
        ("rlhf_eval.model.data.prompts_file", "/data/validation_prompts.jsonl"),
        ("rlhf_eval.model.data.pairs_file", "/data/test_pairs.jsonl"),
    ]
    assert section.writes() == ["/results"] and section.results_file() == "/results/rlhf_eval.json"
    assert section.data_parallel_size(1) == 1
    from omegaconf import OmegaConf

    root = OmegaConf.create({"base_results_dir": "/r", "data_dir": "/d"})
    root.rlhf_eval = OmegaConf.load(CONF / "rlhf_eval" / "gpt3" / "tiny.yaml")
    defaults = OmegaConf.to_container(root, resolve=True)["rlhf_eval"]["model"]
    assert defaults["reward_model_path"] == "/r/rlhf_rm_gpt3_126m/results/checkpoints/megatron_gpt.nemo"
    assert defaults["policy_path"] == "/r/rlhf_ppo/actor_results/checkpoints/megatron_gpt_ppo_actor.nemo"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"trainer": {"devices": 2}}, r"rlhf_eval.trainer.devices=2: rlhf_eval runs in one process"),
        ({"model": {"reference_path": "/p.nemo"}}, r"rlhf_eval.model.reference_path='/p.nemo': is the policy itself"),
        ({"model": {"generation": {"top_p": 0.0}}}, r"rlhf_eval.model.generation.top_p=0.0: must be in \(0, 1\]"),
        (
            {"model": {"generation": {"min_new_tokens": 40}}},
            r"rlhf_eval.model.generation.min_new_tokens=40: must be within 0..max_new_tokens\(16\)",
        ),
    ],
)
def test_settings_that_cannot_run_are_refused_in_one_line(change, message):
    section = eval_section("/p.nemo", "/rm.nemo", None, "/data", "/results")
    for name, values in change.items():
        for key, value in values.items():
            target = section[name]
            if isinstance(value, dict):
                target[key].update(value)
            else:
                target[key] = value
    with pytest.raises(JobConfigError, match=message):
        RlhfEvalConfig.from_dict(section)


def test_the_tiny_policy_scored_by_the_tiny_reward_model(
    tmp_path,
    rlhf_sft_nemo,  # noqa: F811
    rlhf_reward_nemo,  # noqa: F811
    tiny_nemo,  # noqa: F811
    preference_dir,  # noqa: F811
):
    section = eval_section(rlhf_sft_nemo, rlhf_reward_nemo, tiny_nemo, preference_dir, tmp_path)
    result = run_tuning("rlhf_eval", section, tmp_path)
    results = json.loads((tmp_path / "rlhf_eval.json").read_text())
    print(result.stdout[-1500:])
    rewards, ranking, preference = (
        results["policy_rewards"],
        results["reward_model_ranking"],
        results["policy_preference"],
    )
    assert "RLHF evaluation written" in result.stdout and f"{tmp_path}/rlhf_eval.json" in result.stdout
    assert rewards["responses"] == 16 * 4 and ranking["pairs"] == 64 and preference["pairs"] == 64
    # The reward model's held-out figures are the training job's test figures.
    assert ranking["accuracy"] >= 0.9 and ranking["mean_margin"] > 0
    # The SFT policy learnt both kinds of answer: its responses score between the held-out chosen and rejected ones.
    assert ranking["mean_rejected_reward"] < rewards["mean_reward"] < ranking["mean_chosen_reward"]
    assert rewards["ended_with_eod"] > 0.5 and 1 <= rewards["mean_response_tokens"] <= 16
    # Sampled from the policy, its responses are much likelier under it than under the random model it came from.
    assert rewards["kl_to_reference"] > 1.0
    assert preference["against"] == "reference" and 0.0 <= preference["accuracy"] <= 1.0


def test_sampling_is_seeded_and_greedy_is_deterministic_and_pair_log_probs_match_a_direct_sum(
    rlhf_sft_nemo,  # noqa: F811
    rlhf_reward_nemo,  # noqa: F811
    preference_dir,  # noqa: F811
):
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo
    from nemo_launcher.jobs.rlhf.evaluation import Generation, policy_preference, policy_rewards
    from nemo_launcher.jobs.rlhf.pairs import read_pairs
    from nemo_launcher.jobs.rlhf.prompts import read_prompts
    from nemo_launcher.jobs.rlhf.reward_model import load_scalar_model
    from nemo_launcher.jobs.rlhf.rollouts import TokenSampler

    reward, _, _ = load_scalar_model(GPT, rlhf_reward_nemo, 1, "fp32", False)
    policy, tokenizer = load_gpt_from_nemo(rlhf_sft_nemo, 1, 1, "fp32")
    prompts = [p.ids for p in read_prompts(pd.prompts_file(str(preference_dir), "validation"), 2048)][:6]
    generation = Generation(max_new_tokens=8, min_new_tokens=1, samples_per_prompt=2, micro_batch_size=4)

    def rewards(sampler, seed):
        generator = torch.Generator().manual_seed(seed)
        return policy_rewards(policy, reward, prompts, sampler, generation, tokenizer.eod, 2048, generator)

    sampled = TokenSampler()
    assert rewards(sampled, 5) == rewards(sampled, 5) != rewards(sampled, 6)
    greedy = TokenSampler(greedy=True)
    assert rewards(greedy, 5) == rewards(greedy, 6)

    pairs = read_pairs(pd.pairs_file(str(preference_dir), "test"), 2048, 64, "length")[:3]
    margins = []
    with torch.no_grad():
        for pair in pairs:
            sums = []
            for response in (pair.chosen, pair.rejected):
                tokens = torch.tensor([list(pair.prompt + response)])
                logits = policy(tokens, torch.arange(tokens.shape[1]).unsqueeze(0), None)[0, :, :2048]
                logp = torch.log_softmax(logits.double(), dim=-1)
                start = len(pair.prompt)
                sums.append(sum(logp[t - 1, tokens[0, t]].item() for t in range(start, tokens.shape[1])))
            margins.append(sums[0] - sums[1])
    found = policy_preference(policy, pairs, tokenizer.eod, micro_batch_size=2)
    assert found["against"] == "raw log-probabilities"
    assert found["mean_margin"] == pytest.approx(sum(margins) / 3, abs=1e-4)
    assert found["accuracy"] == pytest.approx(sum(m > 0 for m in margins) / 3)
