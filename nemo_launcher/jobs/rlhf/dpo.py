"""The DPO loss and the summed response log-probabilities it compares, for a megatron-core GPT of any TP size.

    step = partial(dpo_forward_step, DpoSettings.of(cfg.model.dpo))   # the recipe's forward_step_func
    recipe = dataclasses.replace(GPT, forward_step=step, split_microbatches=pairs.split_pair_microbatches, ...)
    sums = response_log_probs(model, pairs.collate_pairs(pairs, pad_id))   # the reference job: no gradients

Batches are jobs/rlhf/pairs.py's (chosen rows, then their rejected partners; ref_logps from the reference job).

The model is called with labels, so megatron-core computes each token's negative log-likelihood with its
vocab-parallel cross entropy: every TP rank gets the full value without gathering the logits. A response's
log-probability is minus the sum of those over its tokens (float64 sums, so that a policy equal to its reference
gives a log-ratio of 0 to within rounding, and a first loss of ln 2).

    loss = w_pref * -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))  +  w_sft * NLL(chosen)

The implicit rewards are beta * (pi - ref) of each response; accuracy is the share of pairs whose chosen reward is
the larger; the margin is their mean difference. All are reported beside the loss, in training and validation.
"""

from dataclasses import dataclass
from functools import partial

import torch

# What the loss function reports, in the order the recipe lists them (the first is the one minimised).
LOSS_NAMES = (
    "dpo loss",
    "preference loss",
    "sft loss",
    "preference accuracy",
    "reward margin",
    "chosen reward",
    "rejected reward",
)


@dataclass(frozen=True)
class DpoSettings:
    beta: float
    preference_loss_weight: float
    sft_loss_weight: float
    preference_average_log_probs: bool
    sft_average_log_probs: bool

    @classmethod
    def of(cls, section) -> "DpoSettings":
        """From the bound model.dpo section (contract/schemas/rlhf_dpo.py's DpoSection)."""
        return cls(
            section.ref_policy_kl_penalty,
            section.preference_loss_weight,
            section.sft_loss_weight,
            section.preference_average_log_probs,
            section.sft_average_log_probs,
        )


def token_nll(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token negative log-likelihood [rows, s], the mask of the positions whose next token is a response token).
    Entry t is -log p(tokens[t + 1] | tokens[..t]); the last position has no next token and is never counted."""
    tokens, response = batch["tokens"], batch["response_mask"]
    labels = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)
    mask = torch.cat([response[:, 1:], torch.zeros_like(response[:, :1])], dim=1)
    return model(tokens, batch["position_ids"], None, labels=labels), mask


def summed_log_probs(nll: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the response tokens' log-probs [rows] in float64, response tokens per row [rows])."""
    mask = mask.reshape(nll.shape).to(torch.float64)
    return -(nll.to(torch.float64) * mask).sum(-1), mask.sum(-1)


@torch.no_grad()
def response_log_probs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[rows] summed response log-probs of a collated batch of pairs (chosen rows, then rejected), float64."""
    sums, _ = summed_log_probs(*token_nll(model, batch))
    return sums


def as_pairs(per_row: torch.Tensor) -> torch.Tensor:
    """[2m] (chosen rows, then rejected) -> [m, 2] (chosen, rejected) per pair."""
    return per_row.reshape(2, -1).transpose(0, 1)


def dpo_forward_step(settings: DpoSettings, data_iterator, model):
    """megatron-core's forward_step_func for DPO: one micro-batch of pairs through the policy."""
    batch = next(data_iterator)
    nll, mask = token_nll(model, batch)
    return nll, partial(dpo_loss, settings, mask, batch["ref_logps"])


def dpo_loss(settings: DpoSettings, mask: torch.Tensor, reference: torch.Tensor, nll: torch.Tensor):
    """(loss, {name: value}) of one micro-batch, as megatron's schedules expect: `nll` the policy's per-token NLL
    [2m, s] and `mask` its response positions (token_nll), `reference` [2m] the reference's summed log-probs (rows
    as in the batch: chosen, then rejected)."""
    sums, counts = summed_log_probs(nll, mask)
    policy = as_pairs(sums)  # [m, 2]
    tokens = as_pairs(counts.clamp(min=1.0))
    ref = as_pairs(reference.to(policy))
    if settings.preference_average_log_probs:  # compare per-token means: long responses weigh no more
        policy_view, ref_view = policy / tokens, ref / tokens
    else:
        policy_view, ref_view = policy, ref
    rewards = settings.beta * (policy_view - ref_view)  # implicit rewards, [pairs, 2]
    margin = rewards[:, 0] - rewards[:, 1]
    preference = -torch.nn.functional.logsigmoid(margin).mean()
    chosen_nll = -policy[:, 0] / tokens[:, 0] if settings.sft_average_log_probs else -policy[:, 0]
    sft = chosen_nll.mean()
    loss = (settings.preference_loss_weight * preference + settings.sft_loss_weight * sft).float()
    reported = {
        "dpo loss": loss.detach().clone(),  # a copy: the schedule divides the returned loss in place
        "preference loss": preference.detach().float(),
        "sft loss": sft.detach().float(),
        "preference accuracy": (margin > 0).float().mean().detach(),
        "reward margin": margin.detach().float().mean(),
        "chosen reward": rewards[:, 0].detach().float().mean(),
        "rejected reward": rewards[:, 1].detach().float().mean(),
    }
    return loss, reported
