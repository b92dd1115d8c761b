"""Floating-point operations of a training step: the model's own (for MFU) and those the devices run (with
recomputation, for the step time).

    model_flops_per_sample(shape)            # forward + backward, no recomputation
    flops_per_token(shape)                   # the same over the sample's tokens: the job side's MFU numerator

A matrix multiply of an (n x k) input by a (k x m) weight costs 2 n k m FLOPs forward and twice that backward (input
and weight gradients), so a step is 3x the forward pass (Narayanan et al. 2021, SC'21, eq. 3). Per token and layer
the forward pass multiplies by the QKV, output and MLP weights (x top-k experts with MoE, plus the router) and
computes attention scores and their weighted sum over all s positions, 4 s q. This is Megatron-LM's
num_floating_point_operations (megatron/training/training.py: 12 B s L h^2 (1 + (f/h) k gamma + g/a + s/h +
V/(2 L h)) with gamma = 3/2 for SwiGLU), written per weight so GQA head sizes, cross-attention and other families
fit; like Megatron it counts the causal mask's skipped half, which keeps MFU comparable with published numbers.
Recomputation adds forward work the model does not need: full recomputation one more forward pass of the
recomputed layers, selective recomputation the attention core (Korthikanti et al. 2022, section 5).
"""

from .layout import Layout
from .shapes import ModelShape, Stack


def layer_matmul_flops_per_token(stack: Stack) -> float:
    """Forward FLOPs of one layer's weight multiplies, per token of this stack."""
    h, q, kv, f = stack.hidden, stack.query_width, stack.kv_width, stack.ffn
    attention = 2.0 * h * (q + 2 * kv) + 2.0 * q * h
    mlp = stack.topk * (2.0 * h * f * (2 if stack.gated else 1) + 2.0 * f * h)
    router = 2.0 * h * stack.experts if stack.experts > 1 else 0.0
    cross = 4.0 * h * q if stack.cross_tokens else 0.0  # cross-attention's query and output projections
    return attention + mlp + router + cross


def layer_core_flops_per_token(stack: Stack) -> float:
    """Forward FLOPs of one layer's attention scores and weighted sum, per token (self and cross attention)."""
    return 4.0 * stack.tokens * stack.query_width + 4.0 * stack.cross_tokens * stack.query_width


def layer_forward_flops(stack: Stack) -> float:
    """Forward FLOPs of one layer for one sample; cross-attention's key/value projections run over the memory."""
    cross_kv = 2.0 * stack.cross_width * 2 * stack.kv_width * stack.cross_tokens
    return stack.tokens * (layer_matmul_flops_per_token(stack) + layer_core_flops_per_token(stack)) + cross_kv


def logits_forward_flops(shape: ModelShape) -> float:
    return 2.0 * shape.embedding_width * shape.vocab * shape.output_tokens


def forward_flops_per_sample(shape: ModelShape) -> float:
    layers = sum(stack.layers * layer_forward_flops(stack) for stack in shape.stacks)
    return layers + logits_forward_flops(shape) + shape.extra_flops_per_sample


def passes(layout: Layout | None = None) -> float:
    """Forward passes' worth of work in a training step: 3 (forward, input and weight gradients), or 2 when the
    weights are frozen (PEFT: no weight gradients; the adapters' are negligible)."""
    return 2.0 if layout is not None and layout.frozen_base else 3.0


def model_flops_per_sample(shape: ModelShape, layout: Layout | None = None) -> float:
    """Forward and backward: 3x the forward pass (2x with frozen weights)."""
    return passes(layout) * forward_flops_per_sample(shape)


def flops_per_token(shape: ModelShape) -> float:
    return model_flops_per_sample(shape) / shape.tokens_per_sample


def recomputed_layers(stack_layers: int, layout: Layout) -> float:
    """Layers of a stack whose forward pass full recomputation runs again (per model, over all stages)."""
    if layout.recompute != "full":
        return 0.0
    if layout.recompute_method == "block":
        per_stage = layout.recompute_layers if layout.recompute_layers is not None else stack_layers // layout.pp
        return float(min(per_stage * layout.pp, stack_layers))
    return float(stack_layers)


def recompute_flops_per_sample(shape: ModelShape, layout: Layout) -> float:
    """The extra forward work recomputation makes the devices do, per sample."""
    if layout.recompute == "full":
        return sum(recomputed_layers(s.layers, layout) * layer_forward_flops(s) for s in shape.stacks)
    if layout.recompute == "selective":
        return sum(s.layers * s.tokens * layer_core_flops_per_token(s) for s in shape.stacks)
    return 0.0
