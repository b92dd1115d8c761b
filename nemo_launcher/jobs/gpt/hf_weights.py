"""Hugging Face Llama-layout tensors (Llama, Mistral, Qwen2, Mixtral) -> the state dict of our GPTModel (megatron-core's
local layer spec, TP=1 PP=1), the inverse of hf_export.py's mapping.

    full = megatron_state_dict(SafetensorsFolder(folder, key), section, padded_vocab=128, layers=range(0, 16))

| Hugging Face                                         | ours                                                   |
|------------------------------------------------------|--------------------------------------------------------|
| model.embed_tokens.weight, lm_head.weight            | embedding.word_embeddings.weight, output_layer.weight  |
|                                                      | (zero rows appended up to the padded vocabulary)       |
| self_attn.{q,k,v}_proj.{weight,bias}                 | self_attention.linear_qkv (group-major rows)           |
| self_attn.o_proj                                     | self_attention.linear_proj                             |
| input_layernorm, post_attention_layernorm, norm      | input_layernorm, pre_mlp_layernorm, final_layernorm    |
| mlp.{gate,up}_proj, mlp.down_proj                    | mlp.linear_fc1 ([gate; up]), mlp.linear_fc2            |
| block_sparse_moe.gate, experts.N.{w1,w3}, .w2        | mlp.router, mlp.experts.local_experts.N.linear_fc1     |
|                                                      | ([w1; w3]), .linear_fc2                                |

The padding rows are never a target and the export cuts them off again (model.vocab_size).
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ...contract.hf_architectures import safetensors_files


class SafetensorsFolder(Mapping):
    """The folder's tensors by name (from the one file or the shards an index lists), each read from its memory-mapped
    file only when asked for: a rank reads the layers of its own pipeline stage, not a 70B model's every weight."""

    def __init__(self, folder: Path, key: str):
        from safetensors import safe_open

        self._where = {}
        for path in safetensors_files(Path(folder), key):
            handle = safe_open(str(path), framework="pt")
            self._where.update({name: handle for name in handle.keys()})

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._where[name].get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def merge_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, groups: int, head_dim: int):
    """megatron's linear_qkv rows: per query group, its query heads, then its key head, then its value head."""
    tail = q.shape[1:]
    per_group = heads // groups
    grouped = [
        q.reshape(groups, per_group * head_dim, *tail),
        k.reshape(groups, head_dim, *tail),
        v.reshape(groups, head_dim, *tail),
    ]
    return torch.cat(grouped, dim=1).reshape(-1, *tail)


def _padded(table: torch.Tensor, rows: int) -> torch.Tensor:
    """The embedding or output table with zero rows up to megatron's padded vocabulary."""
    return torch.cat([table, table.new_zeros(rows - table.shape[0], *table.shape[1:])])


def megatron_state_dict(
    hf: Mapping[str, torch.Tensor], section: Mapping[str, Any], padded_vocab: int, layers: range | None = None
) -> dict[str, torch.Tensor]:
    """Our TP=1 PP=1 state dict of the model `section` describes (contract/hf_architectures.py's model_section),
    numbered as the whole model; `layers`: only these (a pipeline stage's), with the embeddings and the final norm
    and head, which split_state_dict places."""
    heads, groups, head_dim = section["num_attention_heads"], section["num_query_groups"], section["kv_channels"]
    with_bias, qkv_bias = section["bias"], section["bias"] or section["qkv_bias"]
    out = {
        "embedding.word_embeddings.weight": _padded(hf["model.embed_tokens.weight"], padded_vocab),
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
    }
    if not section["share_embeddings_and_output_weights"]:
        out["output_layer.weight"] = _padded(hf["lm_head.weight"], padded_vocab)
    for layer in range(section["num_layers"]) if layers is None else layers:
        src, dst = f"model.layers.{layer}.", f"decoder.layers.{layer}."
        attention = src + "self_attn."
        out.update(
            {
                dst + "input_layernorm.weight": hf[src + "input_layernorm.weight"],
                dst + "pre_mlp_layernorm.weight": hf[src + "post_attention_layernorm.weight"],
                dst + "self_attention.linear_qkv.weight": merge_qkv(
                    *(hf[f"{attention}{p}_proj.weight"] for p in "qkv"), heads, groups, head_dim
                ),
                dst + "self_attention.linear_proj.weight": hf[attention + "o_proj.weight"],
            }
        )
        if qkv_bias:
            out[dst + "self_attention.linear_qkv.bias"] = merge_qkv(
                *(hf[f"{attention}{p}_proj.bias"] for p in "qkv"), heads, groups, head_dim
            )
        if with_bias:
            out[dst + "self_attention.linear_proj.bias"] = hf[attention + "o_proj.bias"]
        if section.get("num_moe_experts"):
            out.update(_experts(hf, src + "block_sparse_moe.", dst + "mlp.", section["num_moe_experts"]))
            continue
        mlp = src + "mlp."
        # megatron's SwiGLU computes silu(first half) * second half of linear_fc1's output: gate first.
        out[dst + "mlp.linear_fc1.weight"] = torch.cat([hf[mlp + "gate_proj.weight"], hf[mlp + "up_proj.weight"]])
        out[dst + "mlp.linear_fc2.weight"] = hf[mlp + "down_proj.weight"]
        if with_bias:
            out[dst + "mlp.linear_fc1.bias"] = torch.cat([hf[mlp + "gate_proj.bias"], hf[mlp + "up_proj.bias"]])
            out[dst + "mlp.linear_fc2.bias"] = hf[mlp + "down_proj.bias"]
    return out


def _experts(hf: Mapping[str, torch.Tensor], src: str, dst: str, experts: int) -> dict[str, torch.Tensor]:
    """Mixtral's router and experts: w1 gates, w3 goes up, w2 comes down."""
    out = {dst + "router.weight": hf[src + "gate.weight"]}
    for expert in range(experts):
        hf_expert, ours = f"{src}experts.{expert}.", f"{dst}experts.local_experts.{expert}."
        out[ours + "linear_fc1.weight"] = torch.cat([hf[hf_expert + "w1.weight"], hf[hf_expert + "w3.weight"]])
        out[ours + "linear_fc2.weight"] = hf[hf_expert + "w2.weight"]
    return out
