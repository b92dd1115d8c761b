"""The figures of rlhf_eval, for models already loaded (any family reward_model.py and rollouts.py can run):

    rewards = policy_rewards(policy, reward_model, prompts, sampler, generation, eod, vocab_size, generator, reference)
    ranking = reward_model_ranking(reward_model, pairs, pad_id, micro_batch_size)
    preference = policy_preference(policy, pairs, pad_id, micro_batch_size, reference)

Each returns a dict of plain numbers (JSON-ready). A response is sampled as PPO's actor samples it (rollouts.py) and
scored by the reward model at its last token, as the reward server scores it. The KL to the reference is estimated
on the sampled responses: the mean over them of sum_t log pi(y_t) - log ref(y_t), which is KL(pi || ref) in
expectation (for greedy responses it is only their log-ratio). A pair's log-probabilities are summed over its response
tokens (dpo.py's, as DPO's reference job computes them).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .dpo import response_log_probs
from .pairs import Pair, collate_pairs, split_pairs
from .reward_model import last_token_scores
from .rollouts import RolloutBatch, TokenSampler, generate, response_logprobs


@dataclass(frozen=True)
class Generation:
    max_new_tokens: int
    min_new_tokens: int
    samples_per_prompt: int
    micro_batch_size: int  # prompts per generation batch


def _chunks(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


@torch.no_grad()
def policy_rewards(
    policy: torch.nn.Module,
    reward_model: torch.nn.Module,
    prompts: Sequence[list[int]],
    sampler: TokenSampler,
    generation: Generation,
    eod: int,
    vocab_size: int,
    generator: torch.Generator,
    reference: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Mean (and spread) of the reward of the policy's responses to `prompts`, their length, the share that ended
    with the end-of-document id, and with a reference the mean summed log-ratio (the KL estimate)."""
    rewards, lengths, ended, ratios = [], [], [], []
    rows = [list(prompt) for prompt in prompts for _ in range(generation.samples_per_prompt)]
    for chunk in _chunks(rows, generation.micro_batch_size):
        batch = generate(
            policy,
            chunk,
            sampler,
            generation.max_new_tokens,
            generation.min_new_tokens,
            eod,
            vocab_size,
            generator,
        )
        device = next(reward_model.parameters()).device
        tokens = batch.padded(eod, device)
        lengths_here = torch.tensor([len(row) for row in batch.tokens], device=device)
        rewards += last_token_scores(reward_model, tokens, lengths_here).tolist()
        lengths += batch.response_lengths
        ended += [bool(response) and response[-1] == eod for response in batch.responses()]
        if reference is not None:
            ratios += _summed_log_ratio(policy, reference, batch, eod).tolist()
    values = torch.tensor(rewards, dtype=torch.float64)
    result = {
        "responses": len(rewards),
        "mean_reward": values.mean().item(),
        "reward_std": values.std(unbiased=False).item(),
        "mean_response_tokens": sum(lengths) / len(lengths),
        "ended_with_eod": sum(ended) / len(ended),
    }
    if reference is not None:
        result["kl_to_reference"] = sum(ratios) / len(ratios)
    return result


def _summed_log_ratio(policy, reference, batch: RolloutBatch, pad_id: int) -> torch.Tensor:
    ours, _ = response_logprobs(policy, batch, pad_id)
    theirs, _ = response_logprobs(reference, batch, pad_id)
    return (ours.double() - theirs.double()).sum(-1).cpu()


@torch.no_grad()
def reward_model_ranking(
    reward_model: torch.nn.Module, pairs: Sequence[Pair], pad_id: int, micro_batch_size: int
) -> dict[str, float]:
    """Share of the pairs whose chosen response the reward model scores higher (chance 0.5), the mean margin
    r_chosen - r_rejected, and the mean reward of chosen and of rejected responses."""
    chosen, rejected = [], []
    device = next(reward_model.parameters()).device
    for chunk in _chunks(pairs, micro_batch_size):
        batch = collate_pairs(chunk, pad_id)
        scores = last_token_scores(reward_model, batch["tokens"].to(device), batch["lengths"].to(device))
        good, bad = split_pairs(scores.double().cpu())
        chosen.append(good)
        rejected.append(bad)
    good, bad = torch.cat(chosen), torch.cat(rejected)
    return {
        "pairs": len(good),
        "accuracy": (good > bad).double().mean().item(),
        "mean_margin": (good - bad).mean().item(),
        "mean_chosen_reward": good.mean().item(),
        "mean_rejected_reward": bad.mean().item(),
    }


@torch.no_grad()
def policy_preference(
    policy: torch.nn.Module,
    pairs: Sequence[Pair],
    pad_id: int,
    micro_batch_size: int,
    reference: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Share of the pairs where the policy's summed response log-prob, less the reference's when one is given, is
    larger for the chosen response than for the rejected one, and the mean of that difference (DPO's implicit
    reward margin over beta)."""
    margins = []
    device = next(policy.parameters()).device
    for chunk in _chunks(pairs, micro_batch_size):
        batch = {key: value.to(device) for key, value in collate_pairs(chunk, pad_id).items()}
        scores = response_log_probs(policy, batch).cpu()
        if reference is not None:
            scores = scores - response_log_probs(reference, batch).cpu()
        good, bad = split_pairs(scores)
        margins.append(good - bad)
    margin = torch.cat(margins)
    return {
        "pairs": len(margin),
        "accuracy": (margin > 0).double().mean().item(),
        "mean_margin": margin.mean().item(),
        "against": "reference" if reference is not None else "raw log-probabilities",
    }
