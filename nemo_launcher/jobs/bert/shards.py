"""How megatron-core splits a BERT over TP x PP (local layer spec), for jobs/core/shards.py's merge and split:

    full = merge_shards({(tp_rank, pp_rank): state_dict, ...}, bert_shard_layout(model_config, 2, 1))

The word embeddings and the output layer (weight and bias) are cut along the vocabulary, linear_qkv and linear_fc1
along their output rows (whole heads: the rows are head-major), the row-parallel linear_proj and linear_fc2 along
their input columns; norms, position and token-type embeddings, the LM head's dense layer and norm, the pooler,
the binary head and the row-parallel biases are replicated. GeGLU's linear_fc1 is gated. The last pipeline stage
holds the final norm and every head.
"""

from collections.abc import Mapping
from typing import Any

from ..core.shards import LAYER_COLUMNS, LAYER_REPLICATED, LAYER_ROWS, ShardLayout, ShardRules, section_layout

BERT_RULES = ShardRules(
    stack="encoder",
    column=("embedding.word_embeddings.weight", "output_layer.weight", "output_layer.bias", *LAYER_COLUMNS),
    row=LAYER_ROWS,
    replicated=(
        *LAYER_REPLICATED,
        "embedding.position_embeddings.weight",
        "embedding.tokentype_embeddings.weight",
        "lm_head.dense.weight",
        "lm_head.dense.bias",
        "lm_head.layer_norm.weight",
        "lm_head.layer_norm.bias",
        "pooler.dense.weight",
        "pooler.dense.bias",
        "binary_head.weight",
        "binary_head.bias",
    ),
    last_stage=("encoder.final_layernorm.", "lm_head.", "output_layer.", "pooler.", "binary_head."),
)


def bert_shard_layout(model: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int) -> ShardLayout:
    """The layout of a BERT `model:` section split over TP x PP."""
    return section_layout(BERT_RULES, model, tensor_parallel, pipeline_parallel, gated_activations=("geglu",))
