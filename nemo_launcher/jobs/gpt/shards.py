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

from ..core.shards import ShardLayout, ShardRules

GPT_RULES = ShardRules(
    stack="decoder",
    column=(
        "embedding.word_embeddings.weight",
        "output_layer.weight",
        "self_attention.linear_qkv.weight",
        "self_attention.linear_qkv.bias",
        "mlp.linear_fc1.weight",
        "mlp.linear_fc1.bias",
    ),
    row=("self_attention.linear_proj.weight", "mlp.linear_fc2.weight"),
    replicated=(
        "embedding.position_embeddings.weight",
        "input_layernorm.weight",
        "input_layernorm.bias",
        "pre_mlp_layernorm.weight",
        "pre_mlp_layernorm.bias",
        "final_layernorm.weight",
        "final_layernorm.bias",
        "self_attention.linear_proj.bias",
        "mlp.linear_fc2.bias",
    ),
    last_stage=("decoder.final_layernorm.", "output_layer."),
)


def gpt_shard_layout(model: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int) -> ShardLayout:
    """The layout of a GPT `model:` section split over TP x PP."""
    return ShardLayout(
        GPT_RULES,
        tensor_parallel,
        pipeline_parallel,
        int(model["num_layers"]),
        gated_mlp=model.get("activation") == "fast-swiglu",
        tied_embeddings=bool(model.get("share_embeddings_and_output_weights", True)),
    )
