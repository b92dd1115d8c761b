"""GPT on the trainer core: megatron-core's GPTModel on its GPT dataset, next-token loss.

    from .recipe import GPT          # what gpt/train.py hands to core.program.run_program

The core (nemo_launcher/jobs/core) does everything else; see core/recipe.py for what a recipe provides.
"""

from functools import partial

from ..core.recipe import Recipe
from ..core.steps import context_parallel_token_loss, this_context_rank
from .data import build_gpt_datasets
from .flops import model_flops_per_token
from .model import check_model_support, gpt_chunk, transformer_config


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
