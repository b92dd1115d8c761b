"""The PPO algorithm's tensor functions (jobs/rlhf/ppo.py) against values worked out by hand."""

import math

import pytest
import torch

from nemo_launcher.jobs.rlhf import ppo


def close(actual: torch.Tensor, expected) -> bool:
    return torch.allclose(actual.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6)


def tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_kl_is_the_log_ratio_of_the_sampled_tokens_or_its_magnitude():
    logprobs, ref = tensor([[-1.0, -2.0]]), tensor([[-1.5, -1.0]])
    assert ppo.kl_to_reference(logprobs, ref, absolute=False).tolist() == [[0.5, -1.0]]
    assert ppo.kl_to_reference(logprobs, ref, absolute=True).tolist() == [[0.5, 1.0]]


def test_rewards_penalise_every_token_and_add_the_score_on_the_last_real_one():
    kl = tensor([[0.5, -1.0, 7.0], [2.0, 0.0, 0.0]])
    mask = tensor([[1, 1, 0], [1, 0, 0]])
    rewards = ppo.token_rewards(kl, mask, tensor([2.0, -1.0]), kl_penalty=0.1)
    # Row 0: -0.1 * 0.5, then -0.1 * -1.0 + 2 on its last token; the padding's 7.0 is ignored.
    assert close(rewards, [[-0.05, 2.1, 0.0], [-1.2, 0.0, 0.0]])


def test_gae_by_hand_with_padding():
    # discount 0.9, lambda 0.8, two real tokens:
    #   t=1: delta = 2 + 0.9 * 0 - 1.0 = 1.0 (the episode ends: V after it is 0), A1 = 1.0
    #   t=0: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4, A0 = 1.4 + 0.9 * 0.8 * 1.0 = 2.12
    rewards, values, mask = tensor([[1.0, 2.0, 5.0]]), tensor([[0.5, 1.0, 9.0]]), tensor([[1, 1, 0]])
    advantages, returns = ppo.generalized_advantages(rewards, values, mask, discount=0.9, gae_lambda=0.8)
    assert close(advantages, [[2.12, 1.0, 0.0]])
    assert close(returns, [[2.62, 2.0, 0.0]])


def test_gae_limits_are_monte_carlo_and_one_step_td():
    rewards, values, mask = tensor([[0.0, 1.0, 3.0]]), tensor([[1.0, 2.0, 0.5]]), tensor([[1, 1, 1]])
    # lambda = discount = 1: A_t = sum of rewards from t on - V_t, returns = the rewards to go.
    advantages, returns = ppo.generalized_advantages(rewards, values, mask, discount=1.0, gae_lambda=1.0)
    assert close(advantages, [[3.0, 2.0, 2.5]])
    assert close(returns, [[4.0, 4.0, 3.0]])
    # lambda = 0: the one-step TD error r_t + discount * V_{t+1} - V_t.
    advantages, _ = ppo.generalized_advantages(rewards, values, mask, discount=0.5, gae_lambda=0.0)
    assert close(advantages, [[0.0 + 1.0 - 1.0, 1.0 + 0.25 - 2.0, 3.0 - 0.5]])


def test_normalised_advantages_have_mean_zero_and_unit_deviation_over_real_tokens():
    advantages, mask = tensor([[1.0, 2.0], [3.0, 100.0]]), tensor([[1, 1], [1, 0]])
    # Over 1, 2, 3: mean 2, unbiased variance 1.
    assert close(ppo.normalized(advantages, mask), [[-1.0, 0.0], [1.0, 0.0]])


def test_clipped_loss_by_hand_and_no_gradient_through_clipped_tokens():
    old = tensor([[0.0, 0.0, 0.0]])
    logprobs = torch.log(tensor([[1.5, 0.5, 1.1]])).requires_grad_(True)
    advantages, mask = tensor([[1.0, -1.0, 1.0]]), tensor([[1, 1, 1]])
    loss, clipped = ppo.clipped_policy_loss(logprobs, old, advantages, mask, ratio_eps=0.2)
    # ratio 1.5, A 1: max(-1.5, -1.2) = -1.2 (clipped); ratio 0.5, A -1: max(0.5, 0.8) = 0.8 (clipped);
    # ratio 1.1, A 1: -1.1 (inside the band).
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 1.1) / 3)
    assert clipped.item() == pytest.approx(2 / 3)
    loss.backward()
    # d/dlogp of -ratio * A / 3 = -ratio * A / 3 for the unclipped token; the clipped ones give nothing.
    assert close(logprobs.grad, [[0.0, 0.0, -1.1 / 3]])


def test_policy_loss_at_ratio_one_is_minus_the_mean_advantage():
    logprobs = tensor([[-0.3, -2.0, -1.0]])
    loss, clipped = ppo.clipped_policy_loss(
        logprobs, logprobs.clone(), tensor([[0.5, 1.5, 4.0]]), tensor([[1, 1, 0]]), 0.2
    )
    assert loss.item() == pytest.approx(-1.0)
    assert clipped.item() == 0.0


def test_entropy_and_token_logprobs():
    uniform = torch.zeros(1, 2, 4)
    assert close(ppo.token_entropy(uniform), [[math.log(4)] * 2])
    certain = torch.tensor([[[0.0, -1e4, -1e4]]])
    assert close(ppo.token_entropy(certain), [[0.0]])
    logits = torch.tensor([[[0.0, math.log(3.0)], [math.log(3.0), 0.0], [5.0, 5.0]]])
    tokens = torch.tensor([[0, 1, 0]])
    # Position 0 predicts token 1 with p = 3/4; position 1 predicts token 0 with p = 3/4; the last position is unused.
    assert close(ppo.token_logprobs(logits, tokens), [[math.log(0.75), math.log(0.75)]])


def test_masked_mean_of_an_empty_batch_is_zero():
    assert ppo.masked_mean(tensor([[3.0]]), tensor([[0.0]])).item() == 0.0
