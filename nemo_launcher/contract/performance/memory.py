"""Memory of one device during training: weights, gradients and optimizer state; activations; fixed overheads.

    weights_and_optimizer_bytes(shape, layout)
    activation_bytes(shape, layout)

Weights and optimizer (Megatron-LM megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory):
with 16-bit training each weight costs 18 bytes without a distributed optimizer (2 for the bf16 weight, 4 for its
fp32 gradient, 4 for the fp32 master copy, 8 for Adam's two moments) and 6 + 12 / DP with one (the master copy and
the moments are sharded over the data-parallel ranks). fp32 training keeps no second copy: 16 and 8 + 8 / DP. PEFT
(model.peft.peft_scheme) trains adapters only: the frozen weights cost their own 2 bytes.

Activations per layer (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4 and Table 2): with 16-bit values, s b h (34 + 5 a s / h) bytes for a GPT layer; 10 s b h of it is the
norms', dropout masks' and matmul inputs' share that tensor parallelism leaves whole unless sequence parallelism
splits it too, and 5 a s^2 b is the attention core, which selective recomputation (and a flash-attention kernel)
never stores. Full recomputation keeps a layer's 2 s b h input only, plus one layer's activations while it is
recomputed. The widths here are the layer's own (GQA keys and values, a gated MLP's wider first matrix, top-k
experts), which reduce to 34 s b h for a GPT layer. The first pipeline stage holds p micro-batches in flight
(x (1 + (p - 1) / (p v)) interleaved, x min(1, m / p) when there are fewer micro-batches than stages), the
embedding's input and dropout mask, and with p = 1 the output layer's input and fp32 logits (Megatron-LM's
compute_activation_memory). Context parallelism divides every sequence by cp.
"""

from .layout import Layout
from .parameters import parameters_on_busiest_device
from .shapes import ModelShape, Stack

GIB = 2.0**30


def bytes_per_parameter(layout: Layout, data_parallel: int) -> float:
    full_precision = layout.precision in ("32", "32-true", "fp32")
    if layout.frozen_base:  # PEFT: the weights alone (its adapters, under 1% of them, are not counted)
        return 4.0 if full_precision else 2.0
    weight_and_grad, sharded = (8.0, 8.0) if full_precision else (6.0, 12.0)
    return weight_and_grad + sharded / (data_parallel if layout.distributed_optimizer else 1)


def weights_and_optimizer_bytes(shape: ModelShape, layout: Layout) -> float:
    dense, experts = parameters_on_busiest_device(shape, layout)
    # The distributed optimizer shards over data-parallel and context-parallel ranks (megatron-core shards over
    # the data-parallel group with CP folded in); experts over the ranks that hold the same experts.
    shards = layout.data_parallel * layout.cp
    return dense * bytes_per_parameter(layout, shards) + experts * bytes_per_parameter(
        layout, max(shards // layout.ep, 1)
    )


def layer_activation_bytes(stack: Stack, layout: Layout, tokens: float, flash: bool) -> float:
    """Bytes one layer keeps for its backward pass for one micro-batch, on one device, without recomputation."""
    h, q, kv, f, b = stack.hidden, stack.query_width, stack.kv_width, stack.ffn, layout.mbs
    tp = layout.tp
    # Kept whole on every TP rank unless sequence-parallel: two norm inputs (4h), the QKV and first MLP inputs
    # (2h each), two dropout masks (1 byte each: 2h).
    whole = 10.0 * h
    # Split over TP: Q and K for the scores, V, the attention output projection's input, the MLP's first output
    # (twice as wide when gated) and its activation's output, once per expert a token visits.
    split = 4.0 * q + 4.0 * kv + stack.topk * (2.0 * (2 if stack.gated else 1) + 2.0) * f
    core = 0.0 if flash else 5.0 * stack.heads * stack.tokens  # scores of each local query over every key
    if stack.cross_tokens:
        whole += 5.0 * h  # its norm input, query input and dropout mask
        split += 4.0 * q + 4.0 * kv * stack.cross_tokens / max(stack.tokens, 1)
        core += 0.0 if flash else 5.0 * stack.heads * stack.cross_tokens
    per_token = (whole / tp if layout.sequence_parallel else whole) + (split + core) / tp
    return tokens * b * per_token


def _in_flight(layout: Layout) -> float:
    """Micro-batches' worth of a whole model's layers the first pipeline stage holds (Megatron-LM)."""
    if layout.pp == 1:
        return 1.0
    if layout.vp > 1:
        return 1.0 + (layout.pp - 1) / (layout.pp * layout.vp)
    return min(1.0, layout.micro_batches / layout.pp)


def stack_activation_bytes(stack: Stack, layout: Layout, flash: bool) -> float:
    """A stack's activations on the first pipeline stage, over its in-flight micro-batches."""
    tokens = stack.tokens / layout.cp
    flash = flash or layout.recompute in ("selective", "full")
    full_layer = layer_activation_bytes(stack, layout, tokens, flash)
    layer_input = 2.0 * tokens * layout.mbs * stack.hidden / (layout.tp if layout.sequence_parallel else 1)
    layers = stack.layers
    if layout.recompute != "full":
        return layers * full_layer * _in_flight(layout)
    per_stage = max(layers // layout.pp, 1)
    if layout.recompute_method == "block":
        checkpointed = min(layout.recompute_layers if layout.recompute_layers is not None else per_stage, per_stage)
        kept = (checkpointed * layer_input + (per_stage - checkpointed) * full_layer) * layout.pp
        working = full_layer if checkpointed else 0.0
    else:
        group = max(layout.recompute_layers or 1, 1)
        kept = layers / group * layer_input
        working = group * full_layer  # one group's activations while it is recomputed
    return kept * _in_flight(layout) + working


def activation_bytes(shape: ModelShape, layout: Layout, flash: bool = True) -> float:
    """Activation bytes on the most loaded device (the first pipeline stage). `flash`: the attention core runs a
    fused kernel that stores no s x s scores (Transformer Engine, FlashAttention)."""
    total = sum(stack_activation_bytes(stack, layout, flash) for stack in shape.stacks)
    first = shape.stacks[0] if shape.stacks else None
    if first is not None:
        tokens = first.tokens / layout.cp
        # the embedding's input ids (8 bytes) and dropout mask (1 byte a value), p micro-batches in flight, scaled
        # by the schedule as the layers are (as Megatron-LM counts them)
        embedding = 8.0 * tokens * layout.mbs + tokens * layout.mbs * shape.embedding_width
        total += embedding * layout.pp * _in_flight(layout) / layout.tp
    if layout.pp == 1 and shape.output_tokens and shape.vocab:
        tokens = shape.output_tokens / layout.cp
        # the output layer's input and its fp32 logits for the loss
        width = shape.embedding_width
        total += 4.0 * tokens * layout.mbs * width * (1 + shape.vocab / width) / layout.tp
    return total + shape.extra_activation_bytes_per_sample * layout.mbs
