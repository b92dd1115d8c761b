"""Weights of a model, and how many of them the most loaded device holds.

    total_parameters(shape)                     # 5,051,232,256 for gpt3/5b
    parameters_on_busiest_device(shape, layout) # (dense weights, expert weights) on the first pipeline stage's TP rank

Counts follow megatron-core's layers (Megatron-LM megatron/training/theoretical_memory_usage.py counts the same way):
a layer holds its QKV projection h x (q + 2 kv) (q = heads x head size, kv = query groups x head size: GQA), the
attention output q x h, the MLP's h x f (x 2 when gated: SwiGLU/GeGLU) and f x h, per expert with MoE plus a router
h x experts, biases where the config has them, and two norms (LayerNorm: weight and bias; RMSNorm: weight).
"""

from .layout import Layout
from .shapes import ModelShape, Stack


def attention_parameters(stack: Stack) -> int:
    h, q, kv = stack.hidden, stack.query_width, stack.kv_width
    weights = h * (q + 2 * kv) + q * h
    return weights + ((q + 2 * kv + h) if stack.bias else 0)


def cross_attention_parameters(stack: Stack) -> int:
    """The decoder's attention over the encoder output (or DiT's over the text): queries from the layer, keys
    and values from the memory, and its own norm."""
    if not stack.cross_tokens:
        return 0
    h, q, kv = stack.hidden, stack.query_width, stack.kv_width
    weights = h * q + stack.cross_width * 2 * kv + q * h
    return weights + ((q + 2 * kv + h) if stack.bias else 0) + stack.norm_size * h


def expert_parameters(stack: Stack) -> int:
    """One MLP (one expert of a MoE layer)."""
    h, f = stack.hidden, stack.ffn
    first = f * (2 if stack.gated else 1)
    return h * first + f * h + ((first + h) if stack.bias else 0)


def layer_parameters(stack: Stack) -> tuple[int, int]:
    """(weights every rank of the layer holds, expert weights that expert parallelism splits) of one layer."""
    router = stack.hidden * stack.experts if stack.experts > 1 else 0
    dense = (
        attention_parameters(stack)
        + cross_attention_parameters(stack)
        + 2 * stack.norm_size * stack.hidden
        + router
        + stack.extra_layer_params
    )
    experts = stack.experts * expert_parameters(stack)
    return (dense, experts) if stack.experts > 1 else (dense + experts, 0)


def embedding_parameters(shape: ModelShape) -> int:
    """The token table, and the output layer when it is not tied to it."""
    table = shape.vocab * shape.embedding_width
    return table if shape.tied_output else 2 * table


def total_parameters(shape: ModelShape) -> int:
    layers = sum(stack.layers * sum(layer_parameters(stack)) for stack in shape.stacks)
    return layers + embedding_parameters(shape) + shape.extra_params


def parameters_on_busiest_device(shape: ModelShape, layout: Layout) -> tuple[float, float]:
    """(dense, expert) weights on the most loaded device: the first pipeline stage holds 1/pp of the layers, the
    embedding table and everything outside the stacks (and the output layer too when untied and pp = 1), all split
    over TP; expert weights are further split over EP (Megatron-LM's 'most loaded model shard')."""
    dense_layers = sum(stack.layers * layer_parameters(stack)[0] for stack in shape.stacks)
    expert_layers = sum(stack.layers * layer_parameters(stack)[1] for stack in shape.stacks)
    table = shape.vocab * shape.embedding_width
    outside = table + shape.extra_params + (table if not shape.tied_output and layout.pp == 1 else 0)
    dense = (dense_layers / layout.pp + outside) / layout.tp
    experts = expert_layers / layout.pp / (layout.tp * layout.ep)
    return dense, experts
