"""How megatron-core splits a GPT over TP x PP (local layer spec), for jobs/core/shards.py's merge and split:

    full = merge_shards({(tp_rank, pp_rank): state_dict, ...}, gpt_shard_layout(model_config, 2, 1))
    shard = split_state_dict(full, gpt_shard_layout(model_config, 2, 1), tp_rank=1, pp_rank=0)

Used for `.nemo` archives written with shards (load_nemo), for loading an archive at another TP/PP than it was
written with, and for the Hugging Face export of a model converted to TP/PP > 1. The word embeddings and the output
layer are cut along the vocabulary, linear_qkv along whole query groups (its rows are group-major) and linear_fc1
along its hidden units (SwiGLU's gate and up rows gathered separately); the row-parallel linear_proj and linear_fc2
along their input columns; norms, the learned position table and the row-parallel biases are replicated. The last
pipeline stage holds the final norm and the output layer.
"""

from collections.abc import Mapping
from typing import Any

from ..core.shards import LAYER_COLUMNS, LAYER_REPLICATED, LAYER_ROWS, ShardLayout, ShardRules, section_layout

# A mixture of experts (local spec, expert parallelism 1) splits each expert as a dense MLP over the TP ranks
# (megatron-core's expert TP defaults to TP); the router is whole on every rank.
GPT_RULES = ShardRules(
    stack="decoder",
    column=("embedding.word_embeddings.weight", "output_layer.weight", *LAYER_COLUMNS, "linear_fc1.weight"),
    row=(*LAYER_ROWS, "linear_fc2.weight"),
    replicated=("embedding.position_embeddings.weight", *LAYER_REPLICATED, "mlp.router.weight"),
    last_stage=("decoder.final_layernorm.", "output_layer."),
)


def gpt_shard_layout(model: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int) -> ShardLayout:
    """The layout of a GPT `model:` section split over TP x PP."""
    return section_layout(GPT_RULES, model, tensor_parallel, pipeline_parallel, gated_activations=("fast-swiglu",))
