"""How megatron-core splits a T5 over TP (local layer spec), for jobs/core/shards.py's merge and split:

    full = merge_shards({(tp_rank, 0): state_dict, ...}, t5_shard_layout(model_config, 2, 1))

Cut along dim 0 (column-parallel): the word embeddings and the output layer (weight, and the vocabulary bias of a
tied one) along the vocabulary; self-attention's linear_qkv and cross-attention's linear_q and linear_kv along
whole heads (their rows are head-major); linear_fc1 along its hidden units (gated by geglu, swiglu and reglu:
gate and up rows gathered separately). Cut along dim 1 (row-parallel): every linear_proj and linear_fc2.
Replicated: norms, the learned position table, the row-parallel biases and both relative-position bias tables
(megatron computes the whole bias on every rank and scatters its heads). T5Model registers some modules twice, so
their weights come under two names: the learned position table as embedding.position_embeddings and
position_embeddings, the output layer as lm_head.output_layer and output_layer. A T5 has PP 1 in megatron-core 0.16, so
its one pipeline stage holds everything: the decoder's layers are the numbered stack, and the encoder, the final
norms, the bias tables and the output layer are named as what that (last) stage holds besides.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...contract.schemas.t5_training import T5ModelSection
from ..core.shards import LAYER_COLUMNS, LAYER_REPLICATED, LAYER_ROWS, ShardLayout, ShardRules
from .model import GATED

T5_RULES = ShardRules(
    stack="decoder",
    column=(
        "embedding.word_embeddings.weight",
        "output_layer.weight",
        "output_layer.bias",
        *LAYER_COLUMNS,
        "cross_attention.linear_q.weight",
        "cross_attention.linear_q.bias",
        "cross_attention.linear_kv.weight",
        "cross_attention.linear_kv.bias",
    ),
    row=(*LAYER_ROWS, "cross_attention.linear_proj.weight"),
    replicated=(
        *LAYER_REPLICATED,
        "position_embeddings.weight",
        "pre_cross_attn_layernorm.weight",
        "pre_cross_attn_layernorm.bias",
        "cross_attention.linear_proj.bias",
        "relative_pos_emb.relative_attention_bias.weight",
    ),
    last_stage=(
        "encoder.",
        "encoder_relative_pos_emb.",
        "decoder_relative_pos_emb.",
        "decoder.final_layernorm.",
        "lm_head.",
        "output_layer.",
        "position_embeddings.",
    ),
)


def t5_shard_layout(model: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int = 1) -> ShardLayout:
    """The layout of a T5 `model:` section split over TP (PP must be 1)."""
    if pipeline_parallel != 1:
        raise ValueError(f"PP({pipeline_parallel}): a T5 has one pipeline stage in megatron-core 0.16")
    # A key the config leaves out takes the schema's default, as the model built from the config does (a .nemo
    # without `activation` holds a GeGLU model, whose linear_fc1 splits gate and up rows apart).
    defaults = {f.name: f.default for f in dataclasses.fields(T5ModelSection)}
    return ShardLayout(
        T5_RULES,
        tensor_parallel,
        1,
        int(model["decoder_num_layers"]),
        gated_mlp=model.get("activation", defaults["activation"]) in GATED,
        tied_embeddings=bool(
            model.get("share_embeddings_and_output_weights", defaults["share_embeddings_and_output_weights"])
        ),
    )
