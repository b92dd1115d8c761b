"""Houlsby adapters and IA3 vectors inside the layers of a frozen megatron-core model (local layer spec): a
GPTModel's decoder layers, or a T5Model's encoder and decoder layers.

    adapters = add_houlsby(model, adapter_section, seed=1234)   # after each layer's attention and MLP
    vectors = add_ia3(model)                                      # scales keys, values and the MLP's activations

Both attach through forward hooks, so the base model's parameter names and code stay untouched. Tensors are named
after the linear they sit on (decoder.layers.0.mlp.linear_fc2.ia3_ffn, encoder.layers.1...).

- Houlsby (adapter_learning): out + up(act(down(norm(out)))) on the self-attention block's and the MLP's outputs
  (linear_proj, linear_fc2; the row-parallel outputs are whole on every TP rank, so each rank holds the whole
  adapter and computes the same thing). `up` starts at zero: training starts from the base model.
- IA3 (ia3_learning): learned vectors, started at 1, multiply the keys and values that linear_qkv produces (and, in
  a T5 decoder layer, the encoder-side keys and values of the cross-attention's linear_kv) and the activations that
  enter linear_fc2. They follow the TP split of what they scale (query groups, heads, FFN columns).
"""

import math

import torch

from ..common.config import JobConfigError
from .base import replicated, split


class HoulsbyAdapter(torch.nn.Module):
    def __init__(self, hidden: int, section, generator: torch.Generator):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.down = torch.nn.Linear(hidden, section.adapter_dim, bias=False)
        self.up = torch.nn.Linear(section.adapter_dim, hidden, bias=False)
        self.dropout = torch.nn.Dropout(section.adapter_dropout)
        self.pre = section.norm_position == "pre"
        with torch.no_grad():
            for layer, method in ((self.down, section.column_init_method), (self.up, section.row_init_method)):
                _init(layer.weight, method, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(torch.nn.functional.silu(self.down(self.norm(x) if self.pre else x)))
        return self.dropout(h if self.pre else self.norm(h))


def _init(weight: torch.Tensor, method: str, generator: torch.Generator) -> None:
    if method == "zero":
        weight.zero_()
    elif method == "normal":
        weight.copy_(torch.empty(weight.shape).normal_(0.0, 0.02, generator=generator))
    else:
        std = math.sqrt(2.0 / (weight.shape[0] + weight.shape[1]))
        weight.copy_(torch.empty(weight.shape).normal_(0.0, std, generator=generator))


def _add_adapter(linear, args, kwargs, output):
    result, bias = output
    if bias is not None:  # skip_bias_add: the adapter sees the block's whole output
        result, bias = result + bias, None
    return result + linear.houlsby(result).to(result.dtype), bias


def add_houlsby(model: torch.nn.Module, section, seed: int) -> dict[str, torch.nn.Parameter]:
    """Freezes `model` and adds an adapter after every layer's attention and MLP; returns {name: parameter}."""
    for param in model.parameters():
        param.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for prefix, layer in transformer_layers(model):
        for path in ("self_attention.linear_proj", "mlp.linear_fc2"):
            linear = layer.get_submodule(path)
            adapter = HoulsbyAdapter(model.config.hidden_size, section, generator).to(linear.weight.device)
            linear.houlsby = adapter
            linear.register_forward_hook(_add_adapter, with_kwargs=True)
            for name, param in adapter.named_parameters():
                params[f"{prefix}.{path}.houlsby.{name}"] = param
    return params


def transformer_layers(model: torch.nn.Module):
    """(name prefix, layer) of every transformer layer: the encoder's first (T5), then the decoder's."""
    for stack in ("encoder", "decoder"):
        block = getattr(model, stack, None)
        if block is not None:
            for index, layer in enumerate(block.layers):
                yield f"{stack}.layers.{index}", layer


def houlsby_sharded_state(params: dict[str, torch.nn.Parameter]) -> dict[str, object]:
    return {name: replicated(param, name) for name, param in params.items()}


def _scale_kv(linear, args, kwargs, output):
    result, bias = output
    if bias is not None:
        result, bias = result + bias, None
    return result * linear.ia3_scale().to(result.dtype), bias


def _scale_ffn(linear, args, kwargs):
    x = args[0] if args else kwargs["input_"]
    scaled = x * linear.ia3_ffn.to(x.dtype)
    return ((scaled,) + tuple(args[1:]), kwargs) if args else (args, dict(kwargs, input_=scaled))


class KeyValueScales(torch.nn.Module):
    """This rank's key and value vectors ([local query groups x head size] each) and the qkv output scale they make."""

    def __init__(self, groups: int, queries_per_group: int, head: int, device):
        # queries_per_group 0: a cross-attention's linear_kv, which produces keys and values only
        super().__init__()
        self.groups, self.queries, self.head = groups, queries_per_group, head
        self.key = torch.nn.Parameter(torch.ones(groups * head, device=device))
        self.value = torch.nn.Parameter(torch.ones(groups * head, device=device))

    def forward(self) -> torch.Tensor:
        # linear_qkv's output per query group: its query heads, then its key, then its value.
        ones = torch.ones(self.groups, self.queries * self.head, device=self.key.device, dtype=self.key.dtype)
        parts = [ones, self.key.view(self.groups, self.head), self.value.view(self.groups, self.head)]
        return torch.cat(parts, dim=1).reshape(-1)


def add_ia3(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Freezes `model` and adds IA3 vectors to every layer; returns {name: parameter} (this TP rank's slices)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for param in model.parameters():
        param.requires_grad_(False)
    config = model.config
    tp = parallel_state.get_tensor_model_parallel_world_size()
    heads, groups = config.num_attention_heads, config.num_query_groups or config.num_attention_heads
    head = config.kv_channels
    params = {}
    for prefix, layer in transformer_layers(model):
        linears = [("self_attention.linear_qkv", groups, heads // groups)]
        if hasattr(layer.cross_attention, "linear_kv"):  # a T5 decoder layer: one key and value head per query head
            linears.append(("cross_attention.linear_kv", heads, 0))
        for path, kv_heads, queries in linears:
            linear = layer.get_submodule(path)
            linear.ia3 = KeyValueScales(kv_heads // tp, queries, head, linear.weight.device)
            linear.ia3_scale = linear.ia3.forward
            linear.register_forward_hook(_scale_kv, with_kwargs=True)
            params[f"{prefix}.{path}.ia3.key"] = linear.ia3.key
            params[f"{prefix}.{path}.ia3.value"] = linear.ia3.value
        fc2 = layer.mlp.linear_fc2
        fc2.ia3_ffn = torch.nn.Parameter(torch.ones(fc2.weight.shape[1], device=fc2.weight.device))
        fc2.register_forward_pre_hook(_scale_ffn, with_kwargs=True)
        params[f"{prefix}.mlp.linear_fc2.ia3_ffn"] = fc2.ia3_ffn
    for param in params.values():
        # Each TP rank holds its own slice: without the mark, megatron's gradient norm (clipping) would count only
        # rank 0's slices, as it does for tensors every rank holds whole.
        set_tensor_model_parallel_attributes(param, is_parallel=True, dim=0, stride=1)
    return params


def ia3_sharded_state(params: dict[str, torch.nn.Parameter]) -> dict[str, object]:
    return {name: split(param, name, 0) for name, param in params.items()}


def gather_whole(params: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """Every IA3 vector whole (TP ranks' slices in rank order): a TP collective."""
    from megatron.core import parallel_state

    tp = parallel_state.get_tensor_model_parallel_world_size()
    whole = {}
    for name, param in params.items():
        local = param.detach().float().contiguous()
        if tp > 1:
            parts = [torch.empty_like(local) for _ in range(tp)]
            torch.distributed.all_gather(parts, local, group=parallel_state.get_tensor_model_parallel_group())
            local = torch.cat(parts)
        whole[name] = local.cpu()
    return whole


def load_whole(
    params: dict[str, torch.nn.Parameter], state: dict[str, torch.Tensor], split_vectors: bool, source: str
) -> None:
    """Loads a result file's tensors; IA3 vectors (split_vectors) are cut to this TP rank's slice."""
    from megatron.core import parallel_state

    rank, tp = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_tensor_model_parallel_world_size()
    if set(state) != set(params):
        raise JobConfigError(
            f"{source}: its tensors do not fit this model (missing: {sorted(set(params) - set(state))[:3]}, "
            f"unexpected: {sorted(set(state) - set(params))[:3]}); another base model?"
        )
    with torch.no_grad():
        for name, param in params.items():
            value = state[name].chunk(tp)[rank] if split_vectors else state[name]
            if tuple(value.shape) != tuple(param.shape):
                raise JobConfigError(
                    f"{source}: {name} has shape {tuple(value.shape)}, this model needs {tuple(param.shape)}"
                )
            param.copy_(value)
