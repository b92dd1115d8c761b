"""The PPO algorithm as pure tensor functions (the actor program, jobs/gpt/rlhf_ppo_actor.py, strings them together).

    kl = kl_to_reference(logprobs, ref_logprobs, absolute=False)
    rewards = token_rewards(kl, mask, scores, kl_penalty=0.01)
    advantages, returns = generalized_advantages(rewards, values, mask, discount=1.0, gae_lambda=0.95)
    advantages = normalized(advantages, mask)
    loss, clipped = clipped_policy_loss(new_logprobs, logprobs, advantages, mask, ratio_eps=0.2)

Every per-token tensor is [batch, response positions], right-padded: entry j of row i belongs to the j-th generated
token of rollout i, and `mask` is 1.0 where such a token exists. Position j's value is V(state before token j), the
critic's value at the position before it. A rollout ends after its last generated token: nothing follows it, so
the value there is 0 (the episode is over, not cut off) and the reward model's score is the reward of that last
action. Means are over real tokens only, pooled over the batch (each token weighs the same whatever its rollout's
length), as the clipped objective of Schulman et al. (2017) is written.
"""

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where mask is 1 (a batch with no token gives 0, not NaN)."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, absolute: bool) -> torch.Tensor:
    """Per-token KL estimate log pi(a|s) - log pi_ref(a|s) of the sampled tokens (its expectation under the policy is
    KL(pi || pi_ref)); absolute: |.|, which never rewards a token for being likelier under the reference."""
    difference = logprobs - ref_logprobs
    return difference.abs() if absolute else difference


def token_rewards(kl: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor, kl_penalty: float) -> torch.Tensor:
    """Per-token rewards: -kl_penalty x kl on every generated token, plus the reward model's score of the whole
    response on its last token. scores: [batch]."""
    rewards = -kl_penalty * kl * mask
    last = last_positions(mask)
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    rewards[rows, last] += scores.to(rewards.dtype) * (mask.sum(dim=1) > 0).to(rewards.dtype)
    return rewards


def last_positions(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real token (0 for a row without one)."""
    return (mask.sum(dim=1).long() - 1).clamp(min=0)


def generalized_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, discount: float, gae_lambda: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) by generalized advantage estimation (Schulman et al., 2016):

        delta_t = r_t + discount * V_{t+1} - V_t          (V after the last token is 0: the episode ended)
        A_t     = delta_t + discount * gae_lambda * A_{t+1}
        returns = A + V                                    (the critic's regression targets)

    Padding positions carry 0 in both outputs and contribute nothing to the positions before them."""
    rewards, values, mask = rewards.float(), values.float(), mask.float()
    advantages = torch.zeros_like(rewards)
    following_value = torch.zeros(rewards.shape[0], device=rewards.device)
    following_advantage = torch.zeros(rewards.shape[0], device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + discount * following_value - values[:, t]
        advantage = delta + discount * gae_lambda * following_advantage
        advantages[:, t] = advantage * mask[:, t]
        # A padding position passes on zeros, so the last real token bootstraps from V = 0.
        following_value = values[:, t] * mask[:, t]
        following_advantage = advantages[:, t]
    return advantages, (advantages + values) * mask


def normalized(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Advantages whitened over the batch's real tokens (mean 0, standard deviation 1); padding stays 0.
    The standard deviation is the unbiased one (Bessel's correction), as torch.std gives."""
    count = mask.sum()
    mean = masked_mean(advantages, mask)
    variance = (((advantages - mean) * mask) ** 2).sum() / (count - 1).clamp(min=1.0)
    return (advantages - mean) * torch.rsqrt(variance + eps) * mask


def clipped_policy_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, ratio_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(PPO's clipped surrogate loss, fraction of tokens whose ratio was clipped):

        ratio = exp(log pi(a|s) - log pi_old(a|s))
        loss  = mean over tokens of max(-ratio * A, -clip(ratio, 1 - eps, 1 + eps) * A)

    The gradient flows through `logprobs` only (old_logprobs and advantages are the rollout's constants)."""
    ratio = torch.exp(logprobs - old_logprobs.detach())
    advantages = advantages.detach()
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1.0 - ratio_eps, 1.0 + ratio_eps) * advantages
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return loss, clip_fraction.detach()


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution, [batch, positions] from logits [batch, positions, vocab]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(tokens[:, t+1] | tokens[:, :t+1]) for t = 0 .. width-2 from logits [batch, width, vocab] of `tokens`
    [batch, width]: entry t scores the token after position t, as the initial-policy server's /logprobs does."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
