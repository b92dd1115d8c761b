"""LoRA: low-rank updates on the linear layers of a megatron-core model (local layer spec), any family: a
GPTModel's decoder layers, or a T5Model's encoder and decoder layers.

    adapters = add_lora(model, LoraSection(adapter_dim=8, alpha=16, target_modules=["attention_qkv"]), seed=1234)
    ... train: only adapter parameters require gradients ...
    state = adapters.state_dict()        # full (TP-independent) adapter tensors, for the adapter file
    adapters.merge()                     # W += alpha / r * B A in place; the model is a plain GPTModel again

The peft programs (gpt/peft.py, t5/peft.py) run it as the `LoraMethod` of a tuning run (tuning.py): checkpoints
hold the adapters alone, each TP rank's slice named with its axis.

A target names every linear of its kind in a layer: attention_qkv is the self-attention's linear_qkv and, in a T5
decoder layer, the cross-attention's linear_q and linear_kv too; attention_dense both attentions' linear_proj.

Each adapted linear computes `W x + alpha / r * B A dropout(x)`. A is r x in, B is out x r. The adapter is a
child module of the linear (`<linear>.lora.a` / `.lora.b`) and is added through a forward hook, so the
base model's parameter names and forward code stay untouched and its state dict keeps loading as usual.

Tensor parallelism follows the layer it adapts, so the update lands where the base output does:
- column-parallel (linear_qkv, linear_q, linear_kv, linear_fc1: input whole, output split): A whole, B split by rows;
  the r-dim activation enters the TP region like the base layer's input (gradients all-reduced).
- row-parallel (linear_proj, linear_fc2: input split, output reduced): A split by columns, its r-dim
  output all-reduced, B whole.
Initial values are drawn for the whole matrix from a generator seeded per adapter and then cut to this
rank's part, so TP=1 and TP=2 runs start from the same adapters.
"""

import dataclasses
import math

import torch

from ...contract.schemas.gpt_sft import LoraSection
from ..common.config import JobConfigError
from .base import Method, copy_into, replicated, split
from .layer_adapters import transformer_layers
from .lora_file import load_adapter_file, save_adapter_file
from .tuned_files import save_model, saving, tensor_bytes

# target name -> ((attribute path inside a transformer layer, parallel kind), ...); a layer without a path (the
# cross-attention outside a T5 decoder) skips it
TARGETS = {
    "attention_qkv": (
        ("self_attention.linear_qkv", "column"),
        ("cross_attention.linear_q", "column"),
        ("cross_attention.linear_kv", "column"),
    ),
    "attention_dense": (("self_attention.linear_proj", "row"), ("cross_attention.linear_proj", "row")),
    "mlp_fc1": (("mlp.linear_fc1", "column"),),
    "mlp_fc2": (("mlp.linear_fc2", "row"),),
}


def _tp():
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_tensor_model_parallel_world_size()


def _rows_of_rank(full: torch.Tensor, dim: int, gated: bool) -> torch.Tensor:
    """This TP rank's part of a full tensor cut along `dim`. A gated MLP's fc1 holds [gate; up] on every
    rank, i.e. [its gate rows; its up rows], so the two halves are cut separately."""
    rank, size = _tp()
    if size == 1:
        return full
    if gated:
        return torch.cat([half.chunk(size, dim=dim)[rank] for half in full.chunk(2, dim=dim)], dim=dim)
    return full.chunk(size, dim=dim)[rank].contiguous()


def _gather(local: torch.Tensor, dim: int, gated: bool) -> torch.Tensor:
    """Inverse of _rows_of_rank: the full tensor from every TP rank's part (a TP collective)."""
    from megatron.core import parallel_state

    _, size = _tp()
    if size == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(size)]
    torch.distributed.all_gather(parts, local.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
    if gated:
        halves = [part.chunk(2, dim=dim) for part in parts]
        return torch.cat([g for g, _ in halves] + [u for _, u in halves], dim=dim)
    return torch.cat(parts, dim=dim)


def _initial(shape, method: str, generator: torch.Generator) -> torch.Tensor:
    full = torch.empty(shape, dtype=torch.float32)
    if method == "zero":
        return full.zero_()
    if method == "normal":
        return full.normal_(0.0, 0.02, generator=generator)
    # xavier (Glorot) normal: std = sqrt(2 / (fan_in + fan_out))
    return full.normal_(0.0, math.sqrt(2.0 / (shape[0] + shape[1])), generator=generator)


class LoraAdapter(torch.nn.Module):
    """The update of one linear layer: scale * B A dropout(x), shaped like that layer's (local) output."""

    def __init__(
        self,
        kind: str,
        in_features: int,
        out_features: int,
        section: LoraSection,
        gated: bool,
        seed: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        super().__init__()
        from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

        self.kind, self.gated = kind, gated
        self.scale = section.alpha / section.adapter_dim
        self.dropout = torch.nn.Dropout(section.adapter_dropout) if section.adapter_dropout > 0 else torch.nn.Identity()
        r = section.adapter_dim
        generator = torch.Generator().manual_seed(seed)
        a_full = _initial((r, in_features), section.column_init_method, generator)
        b_full = _initial((out_features, r), section.row_init_method, generator)
        # Column-parallel: B holds this rank's output rows. Row-parallel: A holds this rank's input columns.
        a = _rows_of_rank(a_full, 1, False) if kind == "row" else a_full
        b = _rows_of_rank(b_full, 0, gated) if kind == "column" else b_full
        self.a = torch.nn.Parameter(a.to(device=device, dtype=dtype))
        self.b = torch.nn.Parameter(b.to(device=device, dtype=dtype))
        # Tells megatron's gradient-norm code which parameters differ across TP ranks (counted on every rank).
        if kind == "row":
            set_tensor_model_parallel_attributes(self.a, True, 1, 1)
        else:
            set_tensor_model_parallel_attributes(self.b, True, 0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from megatron.core.tensor_parallel.mappings import (
            copy_to_tensor_model_parallel_region,
            reduce_from_tensor_model_parallel_region,
        )

        h = torch.nn.functional.linear(self.dropout(x), self.a)
        if self.kind == "column":
            h = copy_to_tensor_model_parallel_region(h)
        else:
            h = reduce_from_tensor_model_parallel_region(h)
        return torch.nn.functional.linear(h, self.b) * self.scale

    def delta_weight(self) -> torch.Tensor:
        """scale * B A for this rank's part of the base weight."""
        return (self.b.float() @ self.a.float()) * self.scale

    def full_state(self) -> dict[str, torch.Tensor]:
        """A and B whole, whatever the TP size (a TP collective)."""
        a = _gather(self.a.detach(), 1, False) if self.kind == "row" else self.a.detach()
        b = _gather(self.b.detach(), 0, self.gated) if self.kind == "column" else self.b.detach()
        return {"a": a.cpu(), "b": b.cpu()}

    def sharded_state(self, name: str) -> dict[str, object]:
        """This rank's A and B as checkpoint entries: the split one with its TP axis, the whole one replicated."""
        if self.kind == "row":
            return {f"{name}.a": split(self.a, f"{name}.a", 1), f"{name}.b": replicated(self.b, f"{name}.b")}
        return {f"{name}.a": replicated(self.a, f"{name}.a"), f"{name}.b": split(self.b, f"{name}.b", 0)}

    def load_full_state(self, state: dict[str, torch.Tensor], key: str) -> None:
        a = _rows_of_rank(state["a"], 1, False) if self.kind == "row" else state["a"]
        b = _rows_of_rank(state["b"], 0, self.gated) if self.kind == "column" else state["b"]
        for name, value in (("a", a), ("b", b)):
            param = getattr(self, name)
            if tuple(value.shape) != tuple(param.shape):
                raise JobConfigError(
                    f"{key}.{name}: adapter file has shape {tuple(value.shape)}, this model "
                    f"needs {tuple(param.shape)} (a different base model, adapter_dim or TP?)"
                )
            with torch.no_grad():
                param.copy_(value)


def _add_update(linear, args, kwargs, output):
    # Runs after the base linear: output is (result, bias or None); the update joins the result.
    x = args[0] if args else kwargs["input_"]
    result, bias = output
    return result + linear.lora(x).to(result.dtype), bias


@dataclasses.dataclass
class Adapters:
    """The adapters attached to one model, by the name of the linear they adapt."""

    model: torch.nn.Module
    modules: dict[str, LoraAdapter]
    hooks: list
    section: LoraSection

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for adapter in self.modules.values() for p in adapter.parameters()]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """{"<linear>.lora.a": A, "<linear>.lora.b": B} with whole tensors (a TP collective)."""
        state = {}
        for name, adapter in self.modules.items():
            for key, value in adapter.full_state().items():
                state[f"{name}.lora.{key}"] = value
        return state

    def sharded_state(self) -> dict[str, object]:
        state = {}
        for name, adapter in self.modules.items():
            state.update(adapter.sharded_state(f"{name}.lora"))
        return state

    def load_sharded_state(self, loaded: dict[str, torch.Tensor]) -> None:
        copy_into(
            {f"{name}.lora.{k}": getattr(adapter, k) for name, adapter in self.modules.items() for k in ("a", "b")},
            loaded,
        )

    def load_state_dict(self, state: dict[str, torch.Tensor], source: str) -> None:
        expected = {f"{name}.lora.{k}" for name in self.modules for k in ("a", "b")}
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise JobConfigError(
                f"{source}: the adapter file does not match the adapters configured "
                f"(missing: {missing[:3]}, unexpected: {extra[:3]}); check target_modules and layer_selection"
            )
        for name, adapter in self.modules.items():
            adapter.load_full_state({"a": state[f"{name}.lora.a"], "b": state[f"{name}.lora.b"]}, f"{name}.lora")

    @torch.no_grad()
    def merge(self) -> None:
        """Adds every update into its base weight and removes the adapters: the model computes the same
        function (up to rounding) with no extra work, and saves as a plain GPTModel."""
        for hook in self.hooks:
            hook.remove()
        for name, adapter in self.modules.items():
            linear = self.model.get_submodule(name)
            linear.weight.add_(adapter.delta_weight().to(linear.weight.dtype))
            del linear.lora
        self.hooks, self.modules = [], {}


def add_lora(model: torch.nn.Module, section: LoraSection, seed: int) -> Adapters:
    """Freezes every parameter of `model` (a bare GPTModel or T5Model) and attaches trainable adapters to the
    targets. layer_selection numbers the layers of each stack (a T5's encoder and decoder alike)."""
    for param in model.parameters():
        param.requires_grad_(False)
    gated = bool(getattr(model.config, "gated_linear_unit", False))
    _, tp = _tp()
    modules, hooks, ranges = {}, [], []
    for stack, first, layers in _stacks(model):
        offset = _first_layer_number(layers)
        ranges.append(f"{offset + 1}..{offset + len(layers)}")
        selected = _selected_layers(section.layer_selection, offset, len(layers))
        for index, layer in enumerate(layers):
            if offset + index + 1 not in selected:
                continue
            for target in section.targets():
                for position, (path, kind) in enumerate(TARGETS[target]):
                    linear = _linear(layer, path)
                    if linear is None:
                        continue
                    out_local, in_local = linear.weight.shape
                    in_features = in_local * tp if kind == "row" else in_local
                    out_features = out_local * tp if kind == "column" else out_local
                    adapter = LoraAdapter(
                        kind,
                        in_features,
                        out_features,
                        section,
                        gated and target == "mlp_fc1",
                        seed=_adapter_seed(seed, first + offset + index, target, position),
                        dtype=linear.weight.dtype,
                        device=linear.weight.device,
                    )
                    linear.lora = adapter
                    hooks.append(linear.register_forward_hook(_add_update, with_kwargs=True))
                    modules[f"{stack}.layers.{index}.{path}"] = adapter
    if not modules:
        raise JobConfigError(
            f"peft.model.peft.lora_tuning.layer_selection: {section.layer_selection} selects none of "
            f"layers {' or '.join(ranges)}"
        )
    return Adapters(model, modules, hooks, section)


def _stacks(model):
    """(stack name, number of the stack's first layer among all stacks, its layers): a T5's encoder, then its
    decoder, whose layers are numbered after the encoder's so that every adapter draws its own initial values."""
    first, stacks = 0, []
    for prefix, _layer in transformer_layers(model):
        stack = prefix.split(".", 1)[0]
        if not stacks or stacks[-1][0] != stack:
            block = getattr(model, stack)
            stacks.append((stack, first, block.layers))
            first += len(block.layers)
    return stacks


def _linear(layer, path: str):
    try:
        linear = layer.get_submodule(path)
    except AttributeError:
        return None
    return linear if hasattr(linear, "weight") else None


def _first_layer_number(layers) -> int:
    """Global number (0-based) of this pipeline stage's first layer of a stack; 0 without pipeline parallelism."""
    return int(getattr(layers[0], "layer_number", 1)) - 1 if len(layers) else 0


def _selected_layers(selection: list[int] | None, offset: int, count: int):
    if selection is None:
        return set(range(offset + 1, offset + count + 1))
    return set(selection)


def _adapter_seed(seed: int, layer: int, target: str, position: int = 0) -> int:
    # Distinct, reproducible streams per adapter, independent of which rank builds it; the first path of a target
    # (the self-attention's) keeps the stream it had before cross-attention paths existed.
    return seed * 1000003 + layer * 101 + sorted(TARGETS).index(target) + len(TARGETS) * position


class LoraMethod(Method):
    """LoRA as a tuning method (tuning.Method): adapters on the frozen base; the adapter file and, with
    model.peft.merge, the merged model are its results."""

    name = "LoRA"
    freezes_base = True

    def __init__(self, peft, seed: int, adapter_path: str, merged_path: str):
        self.peft, self.seed = peft, seed
        self.adapter_path, self.merged_path = adapter_path, merged_path
        self.adapters: Adapters | None = None

    def attach(self, model: torch.nn.Module, job) -> None:
        self.adapters = add_lora(model, self.peft.lora_tuning, seed=self.seed)
        if self.peft.restore_from_path:
            _, state = load_adapter_file(self.peft.restore_from_path)
            self.adapters.load_state_dict(state, self.peft.restore_from_path)

    def sharded_state(self):
        return self.adapters.sharded_state()

    def load_state(self, state) -> None:
        self.adapters.load_sharded_state(state)

    def describe(self, model) -> str:
        section = self.peft.lora_tuning
        count = sum(p.numel() for p in self.adapters.parameters())
        total = sum(p.numel() for p in model.parameters())
        return (
            f"LoRA r={section.adapter_dim} alpha={section.alpha} on {', '.join(section.targets())}: "
            f"{len(self.adapters.modules)} adapters, {count:,} trainable of {total:,} parameters on this rank"
        )

    def write(self, module, job) -> dict[str, str]:
        placement = module.parts.placement
        state = self.adapters.state_dict()  # a TP collective: every rank takes part
        if placement.rank == 0:
            with saving(self.adapter_path, 2 * tensor_bytes(state), job.stage):
                save_adapter_file(self.adapter_path, self.peft.lora_tuning, state, job.base_path)
        written = {"adapter file": self.adapter_path}
        if self.peft.merge:
            self.adapters.merge()
            save_model(job.model, job.nemo_config, self.merged_path, job.stage, placement)
            written["merged model"] = self.merged_path
        return written
