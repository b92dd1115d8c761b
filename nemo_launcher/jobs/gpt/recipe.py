"""GPT on the trainer core: megatron-core's GPTModel on its GPT dataset, next-token loss.

    from .recipe import GPT          # what gpt/train.py hands to core.program.run_program

The core (nemo_launcher/jobs/core) does everything else; see core/recipe.py for what a recipe provides.
"""

import dataclasses
from functools import partial

from ..core.recipe import Recipe
from ..core.steps import context_parallel_token_loss, this_context_rank
from .data import build_gpt_datasets
from .flops import model_flops_per_token
from .model import check_model_support, gpt_chunk, transformer_config
from .moe_balance import take_balance, watch_routers

# What a model with experts reports beside the LM loss (moe_balance.py).
LOAD_BALANCE = "load_balancing_loss"


def gpt_forward_step(data_iterator, model):
    """megatron-core's forward_step_func: one microbatch through one model chunk (pre-training and fine-tuning)."""
    batch = this_context_rank(next(data_iterator))
    output = model(batch["tokens"], batch["position_ids"], batch.get("attention_mask"), labels=batch["labels"])
    return output, partial(context_parallel_token_loss, batch["loss_mask"])


GPT = Recipe(
    megatron_modules=("megatron.core.models.gpt",),
    transformer_config=transformer_config,
    build_chunk=gpt_chunk,
    build_datasets=build_gpt_datasets,
    forward_step=gpt_forward_step,
    flops_per_token=model_flops_per_token,
    check_support=check_model_support,
)


def _moe_forward_step(data_iterator, model):
    output, loss_func = gpt_forward_step(data_iterator, model)
    return output, partial(_with_balance, loss_func)


def _with_balance(loss_func, output):
    loss, reported = loss_func(output)
    return loss, {**reported, LOAD_BALANCE: take_balance(loss.device)}


def _moe_chunk(model, config, vocab_size: int, use_te: bool, stage):
    chunk = gpt_chunk(model, config, vocab_size, use_te, stage)
    watch_routers(chunk)
    return chunk


def gpt_recipe(cfg) -> Recipe:
    """The GPT recipe of a bound training config: a model with experts also logs its load balance."""
    if cfg.model.num_moe_experts is None:
        return GPT
    return dataclasses.replace(
        GPT, build_chunk=_moe_chunk, forward_step=_moe_forward_step, loss_names=("lm loss", LOAD_BALANCE)
    )
