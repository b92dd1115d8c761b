"""Between the per-rank state dicts of a TP x PP GPT model and the one state dict of the TP=1 PP=1 model.

    layout = ShardLayout(tensor_parallel=2, pipeline_parallel=1, num_layers=24, gated_mlp=True, tied_embeddings=False)
    full = merge_shards({(tp_rank, pp_rank): state_dict, ...}, layout)
    shard = split_state_dict(full, layout, tp_rank=1, pp_rank=0)

Used for `.nemo` archives written with shards (load_nemo), for loading an archive at another TP/PP than
it was written with, and for the Hugging Face export of a model converted to TP/PP > 1.
The rules are megatron-core's GPT partitioning with the local layer spec:
column-parallel weights are cut along dim 0 (the vocabulary for the embedding and output layer; whole
query groups for linear_qkv, whose rows are group-major, so plain concatenation restores them),
row-parallel weights along dim 1, and everything else is replicated. SwiGLU's linear_fc1 is the one
exception: each rank holds [its gate rows; its up rows], so gates and ups are gathered separately.
Pipeline stages number their layers from 0; the first stage holds the embeddings, the last the final
norm and the output layer (with tied embeddings and PP > 1, a copy of the word embeddings that megatron
keeps in sync). A parameter no rule names is refused rather than guessed.
"""
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    tensor_parallel: int
    pipeline_parallel: int
    num_layers: int
    gated_mlp: bool  # SwiGLU: linear_fc1 holds gate and up rows
    tied_embeddings: bool  # share_embeddings_and_output_weights

    @classmethod
    def of(cls, model: Mapping[str, Any], tensor_parallel: int, pipeline_parallel: int) -> "ShardLayout":
        """The layout of a `model:` section split over TP x PP."""
        return cls(tensor_parallel, pipeline_parallel, int(model["num_layers"]), model.get("activation") == "fast-swiglu",
                   bool(model.get("share_embeddings_and_output_weights", True)))

    @property
    def layers_per_stage(self) -> int:
        if self.num_layers % self.pipeline_parallel:
            raise ValueError(f"num_layers({self.num_layers}) is not divisible by PP({self.pipeline_parallel})")
        return self.num_layers // self.pipeline_parallel


def merge_shards(shards: Mapping[Tuple[int, int], Mapping[str, Any]], layout: ShardLayout) -> Dict[str, torch.Tensor]:
    expected = {(t, p) for t in range(layout.tensor_parallel) for p in range(layout.pipeline_parallel)}
    if set(shards) != expected:
        raise ValueError(f"shards for {sorted(shards)} given; TP({layout.tensor_parallel}) x PP({layout.pipeline_parallel}) "
                         f"needs {sorted(expected)}")
    merged: Dict[str, torch.Tensor] = {}
    for pp_rank in range(layout.pipeline_parallel):
        stage = [shards[(t, pp_rank)] for t in range(layout.tensor_parallel)]
        for key in stage[0]:
            if key.endswith("._extra_state"):
                continue
            if key == "output_layer.weight" and layout.tied_embeddings:
                continue  # the last stage's copy of the word embeddings; TP=1 PP=1 has one table
            parts = [shard[key] for shard in stage]
            merged[_global_key(key, pp_rank * layout.layers_per_stage)] = _merge_tensor(key, parts, layout.gated_mlp)
    return merged


def split_state_dict(full: Mapping[str, Any], layout: ShardLayout, tp_rank: int, pp_rank: int) -> Dict[str, torch.Tensor]:
    """The state dict of rank (tp_rank, pp_rank): the inverse of merge_shards."""
    first, last = pp_rank == 0, pp_rank == layout.pipeline_parallel - 1
    per_stage = layout.layers_per_stage
    lowest = pp_rank * per_stage
    shard: Dict[str, torch.Tensor] = {}
    for key, value in full.items():
        match = _LAYER.match(key)
        if match:
            layer = int(match.group(1))
            if not lowest <= layer < lowest + per_stage:
                continue
            local = f"decoder.layers.{layer - lowest}.{match.group(2)}"
        elif key.startswith("embedding."):
            if not first:
                continue
            local = key
        elif key.startswith(("decoder.final_layernorm.", "output_layer.")):
            if not last:
                continue
            local = key
        else:
            raise ValueError(f"{key}: not a GPT parameter this module knows how to place on a pipeline stage")
        shard[local] = _split_tensor(key, value, layout, tp_rank)
    if last and not first and layout.tied_embeddings:
        shard["output_layer.weight"] = _split_tensor("output_layer.weight", full["embedding.word_embeddings.weight"], layout, tp_rank)
    return shard


def _split_tensor(key: str, value: torch.Tensor, layout: ShardLayout, tp_rank: int) -> torch.Tensor:
    tp = layout.tensor_parallel
    if tp == 1:
        return value
    if key.endswith(_COLUMN):
        if layout.gated_mlp and key.endswith(("mlp.linear_fc1.weight", "mlp.linear_fc1.bias")):
            gate, up = value.chunk(2, dim=0)
            return torch.cat([gate.chunk(tp, dim=0)[tp_rank], up.chunk(tp, dim=0)[tp_rank]], dim=0)
        return _chunk(key, value, tp, 0)[tp_rank]
    if key.endswith(_ROW):
        return _chunk(key, value, tp, 1)[tp_rank]
    if key.endswith(_REPLICATED):
        return value
    raise ValueError(f"{key}: no rule says how megatron-core splits this parameter over tensor-parallel ranks")


def _chunk(key: str, value: torch.Tensor, parts: int, dim: int):
    if value.shape[dim] % parts:
        raise ValueError(f"{key}: dimension {dim} of size {value.shape[dim]} does not split into TP({parts}) equal parts")
    return value.chunk(parts, dim=dim)


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
