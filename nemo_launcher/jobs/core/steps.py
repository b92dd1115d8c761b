"""One step's microbatches through megatron-core's forward/backward function, and the masked token loss.

    means = run_microbatches(chunks, microbatches, recipe.forward_step, Sequences(128), micro_batch_size=4,
                             forward_only=False)            # {"lm loss": mean over microbatches} on the last stage

`get_forward_backward_func()` runs the microbatches (1F1B across pipeline stages when PP > 1, interleaved
with virtual stages) and the backward passes; megatron DDP's hooks reduce the gradients. The caller zeroes
the gradient buffers before and steps the optimizer after.
"""

from collections.abc import Callable, Sequence

import torch

from .recipe import Sequences


def masked_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of a per-token value over the tokens the mask keeps (0 when it keeps none)."""
    mask = mask.reshape(-1).float()
    return torch.sum(per_token.reshape(-1).float() * mask) / mask.sum().clamp(min=1.0)


def masked_token_loss(loss_mask: torch.Tensor, per_token_loss: torch.Tensor):
    """Mean loss over the tokens the mask keeps, as megatron's schedules expect: (loss, {name: value})."""
    loss = masked_mean(per_token_loss, loss_mask)
    # The schedule divides the returned loss by the number of microbatches *in place*; log a copy.
    return loss, {"lm loss": loss.detach().clone()}


def context_parallel_size() -> int:
    """1 unless megatron's groups exist and split sequences (programs that run a model without them count as 1)."""
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1
    return max(parallel_state.get_context_parallel_world_size(), 1)


def this_context_rank(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A microbatch's share of this context-parallel rank: two of 2 x CP equal chunks of every sequence (the first
    and the mirrored last, so causal attention's work is balanced), as megatron-core cuts it. Unchanged at CP 1."""
    from megatron.core.utils import get_batch_on_this_cp_rank

    if context_parallel_size() == 1:
        return batch
    return get_batch_on_this_cp_rank(dict(batch))


def context_parallel_token_loss(loss_mask: torch.Tensor, per_token_loss: torch.Tensor):
    """masked_token_loss over a sequence split across context-parallel ranks: the mean over every rank's tokens.

    Each rank back-propagates its own tokens' share (local sum / global count); the shares add up to the whole
    sequence's gradient, and x CP undoes megatron DDP's averaging over the data x context-parallel ranks."""
    from megatron.core import parallel_state

    cp = context_parallel_size()
    if cp == 1:
        return masked_token_loss(loss_mask, per_token_loss)
    mask = loss_mask.reshape(-1).float()
    local_sum = torch.sum(per_token_loss.reshape(-1).float() * mask)
    totals = torch.stack([local_sum.detach(), mask.sum()])
    torch.distributed.all_reduce(totals, group=parallel_state.get_context_parallel_group())
    count = totals[1].clamp(min=1.0)
    return local_sum / count * cp, {"lm loss": (totals[0] / count).clone()}


def run_microbatches(
    chunks: list[torch.nn.Module],
    microbatches: list[dict],
    forward_step: Callable,
    sequences: Sequences,
    micro_batch_size: int,
    forward_only: bool,
    loss_names: Sequence[str] = ("lm loss",),
) -> dict[str, torch.Tensor] | None:
    """Forward (and backward) over the microbatches; on the last pipeline stage the mean of each reported loss
    over the microbatches, elsewhere None."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    iterators = [iter(microbatches) for _ in chunks]  # every chunk walks the same microbatches in order
    reports = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iterators if len(chunks) > 1 else iterators[0],
        model=list(chunks) if len(chunks) > 1 else chunks[0],
        num_microbatches=len(microbatches),
        seq_length=sequences.encoder,
        micro_batch_size=micro_batch_size,
        decoder_seq_length=sequences.decoder,
        forward_only=forward_only,
    )
    if not reports:
        return None
    return {name: torch.stack([report[name] for report in reports]).mean() for name in loss_names}
