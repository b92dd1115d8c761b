"""Between the per-rank state dicts of a TP x PP megatron-core model and the one state dict of its TP=1 PP=1 form,
for any family whose rules (`ShardRules`: which parameters are cut along which dimension, which pipeline stage
holds what) are written down in its package.

    layout = ShardLayout(BERT_RULES, tensor_parallel=2, pipeline_parallel=1, num_layers=2, gated_mlp=True,
                         tied_embeddings=True)
    full = merge_shards({(tp_rank, pp_rank): state_dict, ...}, layout)
    shard = split_state_dict(full, layout, tp_rank=1, pp_rank=0)

The rules are megatron-core's partitioning with the local layer spec: column-parallel weights are cut along dim 0
(rows of linear_qkv are head- or group-major, so plain concatenation restores them), row-parallel weights along
dim 1, the rest is replicated. A gated MLP's linear_fc1 is the one exception: each rank holds [its gate rows; its
up rows], so gates and ups are gathered separately. Pipeline stages number their layers from 0; the first holds
the embeddings, the last the family's final modules (with tied embeddings and PP > 1 also a copy of the word
embeddings, which megatron keeps in sync). A parameter no rule names is refused rather than guessed.
"""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import torch

# A gated MLP's first layer: the dense one (mlp.linear_fc1), and each expert's (mlp.experts.local_experts.<n>.)
_GATED = ("linear_fc1.weight", "linear_fc1.bias")

# megatron-core's local transformer layer (self-attention and MLP) and the stack's final norm, by how tensor
# parallelism splits them: the same in every family, whose rules add their embeddings, heads and further attention.
LAYER_COLUMNS = (
    "self_attention.linear_qkv.weight",
    "self_attention.linear_qkv.bias",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc1.bias",
)
LAYER_ROWS = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
LAYER_REPLICATED = (
    "input_layernorm.weight",
    "input_layernorm.bias",
    "pre_mlp_layernorm.weight",
    "pre_mlp_layernorm.bias",
    "final_layernorm.weight",
    "final_layernorm.bias",
    "self_attention.linear_proj.bias",
    "mlp.linear_fc2.bias",
)
_TIED_COPY = "output_layer.weight"
_WORD_EMBEDDINGS = "embedding.word_embeddings.weight"


@dataclasses.dataclass(frozen=True)
class ShardRules:
    """One family's partitioning, by parameter-name suffix (and prefix, for pipeline placement)."""

    stack: str  # the module holding the numbered layers: "decoder" (GPT), "encoder" (BERT)
    column: tuple[str, ...]  # cut along dim 0
    row: tuple[str, ...]  # cut along dim 1
    replicated: tuple[str, ...]  # the same on every tensor-parallel rank
    last_stage: tuple[str, ...]  # prefixes of what the last pipeline stage holds besides its layers

    def layer(self, key: str):
        return re.match(rf"^{re.escape(self.stack)}\.layers\.(\d+)\.(.+)$", key)


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    rules: ShardRules
    tensor_parallel: int
    pipeline_parallel: int
    num_layers: int
    gated_mlp: bool  # linear_fc1 holds gate and up rows
    tied_embeddings: bool  # share_embeddings_and_output_weights

    @property
    def layers_per_stage(self) -> int:
        if self.num_layers % self.pipeline_parallel:
            raise ValueError(f"num_layers({self.num_layers}) is not divisible by PP({self.pipeline_parallel})")
        return self.num_layers // self.pipeline_parallel


def section_layout(
    rules: ShardRules,
    model: Mapping[str, Any],
    tensor_parallel: int,
    pipeline_parallel: int,
    gated_activations: tuple[str, ...],
) -> ShardLayout:
    """The layout of a family's `model:` section (a mapping, as a .nemo stores it) split over TP x PP: its
    `num_layers`, a gated linear_fc1 when its `activation` is one of gated_activations, and tied embeddings unless
    share_embeddings_and_output_weights says otherwise."""
    return ShardLayout(
        rules,
        tensor_parallel,
        pipeline_parallel,
        int(model["num_layers"]),
        gated_mlp=model.get("activation") in gated_activations,
        tied_embeddings=bool(model.get("share_embeddings_and_output_weights", True)),
    )


def merge_shards(shards: Mapping[tuple[int, int], Mapping[str, Any]], layout: ShardLayout) -> dict[str, torch.Tensor]:
    expected = {(t, p) for t in range(layout.tensor_parallel) for p in range(layout.pipeline_parallel)}
    if set(shards) != expected:
        raise ValueError(
            f"shards for {sorted(shards)} given; TP({layout.tensor_parallel}) x PP({layout.pipeline_parallel}) "
            f"needs {sorted(expected)}"
        )
    merged: dict[str, torch.Tensor] = {}
    for pp_rank in range(layout.pipeline_parallel):
        stage = [shards[(t, pp_rank)] for t in range(layout.tensor_parallel)]
        for key in stage[0]:
            if key.endswith("._extra_state") or (key == _TIED_COPY and layout.tied_embeddings):
                continue  # TE bookkeeping; the last stage's copy of the word embeddings (TP=1 PP=1 has one table)
            offset = pp_rank * layout.layers_per_stage
            merged[_renumber(key, layout.rules, offset)] = _merge_tensor(key, [s[key] for s in stage], layout)
    return merged


def split_state_dict(
    full: Mapping[str, Any], layout: ShardLayout, tp_rank: int, pp_rank: int
) -> dict[str, torch.Tensor]:
    """The state dict of rank (tp_rank, pp_rank): the inverse of merge_shards."""
    first, last = pp_rank == 0, pp_rank == layout.pipeline_parallel - 1
    lowest = pp_rank * layout.layers_per_stage
    shard: dict[str, torch.Tensor] = {}
    for key, value in full.items():
        match = layout.rules.layer(key)
        if match:
            if not lowest <= int(match.group(1)) < lowest + layout.layers_per_stage:
                continue
            local = _renumber(key, layout.rules, -lowest)
        elif key.startswith("embedding."):
            if not first:
                continue
            local = key
        elif key.startswith(layout.rules.last_stage):
            if not last:
                continue
            local = key
        else:
            raise ValueError(f"{key}: not a parameter these rules know how to place on a pipeline stage")
        shard[local] = _split_tensor(key, value, layout, tp_rank)
    if last and not first and layout.tied_embeddings:
        shard[_TIED_COPY] = _split_tensor(_TIED_COPY, full[_WORD_EMBEDDINGS], layout, tp_rank)
    return shard


def _split_tensor(key: str, value: torch.Tensor, layout: ShardLayout, tp_rank: int) -> torch.Tensor:
    tp, rules = layout.tensor_parallel, layout.rules
    if tp == 1:
        return value
    if key.endswith(rules.column):
        if layout.gated_mlp and key.endswith(_GATED):
            gate, up = value.chunk(2, dim=0)
            return torch.cat([_chunk(key, gate, tp, 0)[tp_rank], _chunk(key, up, tp, 0)[tp_rank]], dim=0)
        return _chunk(key, value, tp, 0)[tp_rank]
    if key.endswith(rules.row):
        return _chunk(key, value, tp, 1)[tp_rank]
    if key.endswith(rules.replicated):
        return value
    raise ValueError(f"{key}: no rule says how megatron-core splits this parameter over tensor-parallel ranks")


def _merge_tensor(key: str, parts, layout: ShardLayout) -> torch.Tensor:
    rules = layout.rules
    if len(parts) == 1:
        return parts[0]
    if key.endswith(rules.column):
        if layout.gated_mlp and key.endswith(_GATED):
            halves = [part.chunk(2, dim=0) for part in parts]
            return torch.cat([gate for gate, _ in halves] + [up for _, up in halves], dim=0)
        return torch.cat(parts, dim=0)
    if key.endswith(rules.row):
        return torch.cat(parts, dim=1)
    if key.endswith(rules.replicated):
        return parts[0]
    raise ValueError(f"{key}: no rule says how megatron-core splits this parameter over tensor-parallel ranks")


def _chunk(key: str, value: torch.Tensor, parts: int, dim: int):
    if value.shape[dim] % parts:
        raise ValueError(
            f"{key}: dimension {dim} of size {value.shape[dim]} does not split into TP({parts}) equal parts"
        )
    return value.chunk(parts, dim=dim)


def _renumber(key: str, rules: ShardRules, offset: int) -> str:
    """State dicts number layers within their pipeline stage; the full model numbers them from 0."""
    match = rules.layer(key)
    if not match:
        return key
    return f"{rules.stack}.layers.{int(match.group(1)) + offset}.{match.group(2)}"
