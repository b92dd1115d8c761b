"""How evenly a mixture-of-experts GPT spreads its tokens, measured on every forward pass: what training logs as
reduced_train_load_balancing_loss and validation as val_load_balancing_loss.

    watch_routers(chunk)            # once per model chunk of a model with experts (the MoE recipe's build_chunk)
    take_balance(device)            # in the loss function: the mean over the MoE layers this microbatch ran through

The value is the Switch Transformer balance E x sum_i f_i P_i (f_i: share of the routed tokens expert i got, P_i: its
mean router probability); 1.0 is an even spread, E the worst. It is the auxiliary loss megatron-core adds to the LM
loss times moe_aux_loss_coeff, but megatron-core records it only while training with a coefficient above 0:
measured here from each router's own output, it reads the same with any coefficient and in validation too. With
pipeline parallelism the last stage reports its own MoE layers.
"""

import torch

# One value per MoE layer run since the last take_balance; the routers' hooks append, the loss function empties it.
_LAYER_BALANCES: list[torch.Tensor] = []


def watch_routers(chunk: torch.nn.Module) -> None:
    from megatron.core.transformer.moe.router import TopKRouter

    for module in chunk.modules():
        if isinstance(module, TopKRouter):
            module.register_forward_hook(_record_balance)


def _record_balance(router, inputs, outputs) -> None:
    from megatron.core.transformer.moe.moe_utils import switch_load_balancing_loss_func

    _, routing_map = outputs
    experts = router.config.num_moe_experts
    with torch.no_grad():
        scores = torch.softmax(router.gating(inputs[0]).reshape(-1, experts).float(), dim=-1)
        balance = switch_load_balancing_loss_func(
            probs=scores,
            tokens_per_expert=routing_map.reshape(-1, experts).sum(dim=0),
            total_num_tokens=scores.shape[0],
            topk=router.topk,
            num_experts=experts,
            moe_aux_loss_coeff=1.0,
        )
    _LAYER_BALANCES.append(balance.detach())


def take_balance(device: torch.device) -> torch.Tensor:
    """The mean balance of the MoE layers run since the last call (0 if none ran), and forget them."""
    if not _LAYER_BALANCES:
        return torch.zeros((), device=device)
    balance = torch.stack(_LAYER_BALANCES).mean().to(device)
    _LAYER_BALANCES.clear()
    return balance
