"""Merging the per-rank state dicts of a TP x PP GPT model into the one state dict of the TP=1 PP=1 model.

    full = merge_shards({(tp_rank, pp_rank): state_dict, ...}, tensor_parallel=2, pipeline_parallel=1,
                        num_layers=24, gated_mlp=True)

Used for `.nemo` archives written with shards (load_nemo) and for the Hugging Face export of a model
converted to TP/PP > 1. The rules are megatron-core's GPT partitioning with the local layer spec:
column-parallel weights are cut along dim 0 (the vocabulary for the embedding and output layer; whole
query groups for linear_qkv, whose rows are group-major, so plain concatenation restores them),
row-parallel weights along dim 1, and everything else is replicated. SwiGLU's linear_fc1 is the one
exception: each rank holds [its gate rows; its up rows], so gates and ups are gathered separately.
A parameter no rule names is refused rather than guessed.
"""
import re
from typing import Any, Dict, Mapping, Tuple

import torch

_COLUMN = ("embedding.word_embeddings.weight", "output_layer.weight", "self_attention.linear_qkv.weight",
           "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
_REPLICATED = ("embedding.position_embeddings.weight", "input_layernorm.weight", "input_layernorm.bias",
               "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias", "final_layernorm.weight", "final_layernorm.bias",
               "self_attention.linear_proj.bias", "mlp.linear_fc2.bias")
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")


def merge_shards(shards: Mapping[Tuple[int, int], Mapping[str, Any]], tensor_parallel: int, pipeline_parallel: int,
                 num_layers: int, gated_mlp: bool) -> Dict[str, torch.Tensor]:
    expected = {(t, p) for t in range(tensor_parallel) for p in range(pipeline_parallel)}
    if set(shards) != expected:
        raise ValueError(f"shards for {sorted(shards)} given; TP({tensor_parallel}) x PP({pipeline_parallel}) needs {sorted(expected)}")
    if num_layers % pipeline_parallel:
        raise ValueError(f"num_layers({num_layers}) is not divisible by PP({pipeline_parallel})")
    per_stage = num_layers // pipeline_parallel
    merged: Dict[str, torch.Tensor] = {}
    for pp_rank in range(pipeline_parallel):
        stage = [shards[(t, pp_rank)] for t in range(tensor_parallel)]
        for key in stage[0]:
            if key.endswith("._extra_state"):
                continue
            parts = [shard[key] for shard in stage]
            merged[_global_key(key, pp_rank * per_stage)] = _merge_tensor(key, parts, gated_mlp)
    return merged


def _global_key(key: str, layer_offset: int) -> str:
    """State dicts number layers within their pipeline stage; the full model numbers them from 0."""
    match = _LAYER.match(key)
    if not match:
        return key
    return f"decoder.layers.{int(match.group(1)) + layer_offset}.{match.group(2)}"


def _merge_tensor(key: str, parts, gated_mlp: bool) -> torch.Tensor:
    if len(parts) == 1:
        return parts[0]
    if key.endswith(_COLUMN):
        if gated_mlp and key.endswith(("mlp.linear_fc1.weight", "mlp.linear_fc1.bias")):
            halves = [part.chunk(2, dim=0) for part in parts]
            return torch.cat([gate for gate, _ in halves] + [up for _, up in halves], dim=0)
        return torch.cat(parts, dim=0)
    if key.endswith(_ROW):
        return torch.cat(parts, dim=1)
    if key.endswith(_REPLICATED):
        return parts[0]
    raise ValueError(f"{key}: no rule says how megatron-core splits this parameter over tensor-parallel ranks")
