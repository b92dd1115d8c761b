"""BERT on the trainer core: megatron-core's BertModel on its masked word-piece dataset, masked-LM loss plus,
with model.bert_binary_head, the sentence-order loss.

    recipe = bert_recipe(cfg)         # what bert/train.py hands to core.program.run_program

With the binary head the minimised loss is their sum, as in Megatron-LM's pretrain_bert, and the progress lines,
TensorBoard and the summary report it as `loss`, with `lm_loss` and `sop_loss` beside it; without the head the
masked-LM loss is the only one. The core (nemo_launcher/jobs/core) does everything else; see core/recipe.py.
"""

from functools import partial

import torch.nn.functional as F

from ..core.recipe import Recipe
from ..core.steps import masked_mean
from .data import build_bert_datasets
from .flops import model_flops_per_token
from .lddl_data import build_lddl_datasets, lddl_description, lddl_microbatches
from .model import bert_chunk, transformer_config

TWO_HEADS = ("loss", "lm loss", "sop loss")  # minimised sum first, then its parts
MASKED_LM_ONLY = ("lm loss",)


def masked_lm_loss(loss_mask, output):
    per_token, _ = output
    loss = masked_mean(per_token, loss_mask)
    # The schedule divides the returned loss by the number of microbatches in place; report copies.
    return loss, {"lm loss": loss.detach().clone()}


def masked_lm_and_sentence_order_loss(loss_mask, is_random, output):
    per_token, binary_logits = output
    lm = masked_mean(per_token, loss_mask)
    # is_random = 1: the two segments were swapped; the binary head learns to tell.
    sop = F.cross_entropy(binary_logits.float(), is_random)
    loss = lm + sop
    return loss, {"loss": loss.detach().clone(), "lm loss": lm.detach().clone(), "sop loss": sop.detach().clone()}


def bert_forward_step(data_iterator, model, binary_head: bool):
    """megatron-core's forward_step_func: one microbatch through one model chunk. Every pipeline stage reads the
    padding mask (its attention needs it); the first reads the tokens and token types."""
    batch = next(data_iterator)
    types = batch["types"] if binary_head else None
    output = model(batch["text"], batch["padding_mask"], tokentype_ids=types, lm_labels=batch["labels"])
    if binary_head:
        return output, partial(masked_lm_and_sentence_order_loss, batch["loss_mask"], batch["is_random"])
    return output, partial(masked_lm_loss, batch["loss_mask"])


def _summary_items(cfg, outcome):
    heads = "masked LM + sentence order (loss = lm + sop)" if cfg.model.bert_binary_head else "masked LM"
    return [("objective", heads)]


def bert_recipe(cfg) -> Recipe:
    """The recipe for a bound BERT training config: the losses follow model.bert_binary_head."""
    binary_head = cfg.model.bert_binary_head
    lddl = {}
    if cfg.model.data.dataloader_type == "LDDL":
        lddl = dict(
            build_datasets=build_lddl_datasets, split_microbatches=lddl_microbatches, open_data=lddl_description
        )
    return Recipe(
        megatron_modules=(
            "megatron.core.models.bert.bert_model",
            "megatron.core.models.bert.bert_layer_specs",
            "megatron.core.datasets.bert_dataset",
        ),
        transformer_config=transformer_config,
        build_chunk=bert_chunk,
        forward_step=partial(bert_forward_step, binary_head=binary_head),
        loss_names=TWO_HEADS if binary_head else MASKED_LM_ONLY,
        flops_per_token=model_flops_per_token,
        summary_items=_summary_items,
        **({"build_datasets": build_bert_datasets} | lddl),
    )
