"""Seconds per optimizer step, as the sum of what a device waits on.

    breakdown = step_time(shape, layout, profile)    # StepTime(compute_s=..., bubble_s=..., ...)
    breakdown.total_s

The structure is Calculon's (Isaev et al., SC'23, calculon/llm/llm.py), simplified to what the launcher knows:
- compute: every matrix multiply at the device's peak for the precision times the efficiency of a multiply that size
  (gpus.py); element-wise work (norms, activations, dropout, residual adds, softmax without a fused kernel) as bytes
  through memory at 0.9 of its bandwidth; backward = 2x forward; recomputation adds forward work (flops.py);
- the pipeline bubble, (p - 1) / v stage-times per step for 1F1B, interleaved or not (Narayanan et al. 2021, eq. 1:
  bubble fraction (p - 1) / (m v));
- host overhead: where the device does not hide it (a CPU), a dispatch cost per operation, about 25 a layer forward
  and twice that backward, and a fixed latency per collective;
- expert parallelism: each MoE layer sends every token to its top-k experts and back, forward and backward: four
  all-to-alls of (ep - 1) / ep of the k s b h activations;
- tensor parallelism: two all-reduces forward and two backward per layer (or the equal reduce-scatter plus all-gather
  pairs of sequence parallelism), 2 (t - 1) / t of the s b h activations each, over NVLink within a node; hidden when
  Transformer Engine's userbuffer overlap is on;
- context parallelism: each rank passes its keys and values around the ring, (cp - 1) / cp of them, overlapped with
  the attention core where the core takes longer;
- pipeline sends: a micro-batch's s b h output each way per stage boundary and model chunk;
- data parallelism: a reduce-scatter of the 16-bit gradients and an all-gather of the weights with the distributed
  optimizer (2 (d - 1) / d of them in all), an all-reduce without; overlapped with the last micro-batch's backward
  (and the next forward) when the optimizer's overlap settings are on;
- the loss: about 20 bytes read or written per logit, forward and backward (a large vocabulary makes it count);
- the optimizer's update: memory-bound, about 34 bytes read and written per local weight (fp32 master weight,
  two moments, gradient, the 16-bit copy);
- a fixed 20 ms a step for the data loader, the logger and the launch of thousands of kernels that the model does not
  count.
"""

import dataclasses

from .flops import layer_core_flops_per_token, logits_forward_flops, passes, recomputed_layers
from .gpus import DeviceProfile
from .layout import Layout
from .parameters import parameters_on_busiest_device
from .shapes import ModelShape, Stack

FIXED_STEP_OVERHEAD_S = 0.020
# Operations a megatron-core layer issues in its forward pass (norms, projections, attention, activation, dropout
# and residual adds, their reshapes); the backward pass issues about twice as many.
OPS_PER_LAYER_FORWARD = 25
OPTIMIZER_BYTES_PER_WEIGHT = 34.0
LOSS_BYTES_PER_LOGIT = 20.0  # cross-entropy over the vocabulary, forward and backward


@dataclasses.dataclass(frozen=True)
class StepTime:
    compute_s: float  # matrix multiplies and element-wise work of all micro-batches on one device
    bubble_s: float
    tensor_parallel_s: float
    context_parallel_s: float
    pipeline_s: float
    data_parallel_s: float  # the part not hidden behind compute
    optimizer_s: float
    expert_parallel_s: float = 0.0  # MoE token exchange (all-to-all)
    fixed_s: float = FIXED_STEP_OVERHEAD_S

    @property
    def total_s(self) -> float:
        return sum(dataclasses.astuple(self))

    def as_json(self) -> dict[str, float]:
        return {key: round(value, 6) for key, value in dataclasses.asdict(self).items()}


def _matmul_seconds(flops: float, profile: DeviceProfile, layout: Layout) -> float:
    """One multiply's FLOPs (on this device) at the rate a multiply that size reaches."""
    if flops <= 0:
        return 0.0
    precision = "fp8" if layout.fp8 else layout.precision
    return flops / (profile.peak(precision) * profile.matmul_efficiency(flops / 1e9))


def _layer_forward_seconds(stack: Stack, layout: Layout, profile: DeviceProfile, flash: bool) -> tuple[float, float]:
    """(forward seconds of one layer for one micro-batch on one device, of which the attention core)."""
    tokens = stack.tokens * layout.mbs / layout.cp
    h, q, kv, f, tp = stack.hidden, stack.query_width, stack.kv_width, stack.ffn, layout.tp
    gate = 2 if stack.gated else 1
    matmuls = [
        2.0 * tokens * h * (q + 2 * kv) / tp,
        2.0 * tokens * q * h / tp,
        2.0 * tokens * h * f * gate / tp,
        2.0 * tokens * f * h / tp,
    ]
    seconds = sum(_matmul_seconds(flops, profile, layout) for flops in matmuls[:2])
    seconds += stack.topk * sum(_matmul_seconds(flops, profile, layout) for flops in matmuls[2:])
    if stack.cross_tokens:
        cross_kv = 2.0 * stack.cross_tokens * layout.mbs * stack.cross_width * 2 * kv / tp
        seconds += _matmul_seconds(4.0 * tokens * h * q / tp, profile, layout)
        seconds += _matmul_seconds(cross_kv, profile, layout)
    # each of this rank's tokens attends to the whole sequence (context parallelism splits queries, not keys)
    core = _matmul_seconds(tokens * layer_core_flops_per_token(stack) / tp, profile, layout)
    # Element-wise traffic per token, 16-bit: two norms (read and write, 8h), two dropout-and-residual steps (6h),
    # bias and activation over the MLP (read the first output, write the activation: (gate + 1) f x top-k), and,
    # without a fused attention kernel, the softmax and dropout over the scores.
    whole = 14.0 * h
    split = 2.0 * (gate + 1) * f * stack.topk
    if not flash:
        split += 2.0 * 5 * stack.heads * (stack.tokens + stack.cross_tokens)
    per_token = (whole / tp if layout.sequence_parallel else whole) + split / tp
    element_wise = tokens * per_token / (profile.hbm_bytes_per_s * profile.hbm_efficiency)
    return seconds + core + element_wise, core


def _ring_seconds(bytes_each: float, ranks: int, across_nodes: bool, profile: DeviceProfile) -> float:
    """One ring all-gather or reduce-scatter: (n - 1) / n of the data through each device's link."""
    if ranks <= 1 or bytes_each <= 0:
        return 0.0
    if across_nodes:
        bandwidth = profile.network_bytes_per_s * profile.network_efficiency
    else:
        bandwidth = profile.nvlink_bytes_per_s * profile.nvlink_efficiency
    return bytes_each * (ranks - 1) / ranks / bandwidth


def step_time(shape: ModelShape, layout: Layout, profile: DeviceProfile, flash: bool = True) -> StepTime:
    per_node = profile.devices_per_node
    m = layout.micro_batches
    stage_forward = 0.0  # one micro-batch through this device's share of every stack
    recompute = 0.0
    cores = 0.0
    tp_bytes = 0.0  # bytes each TP collective moves, summed over the collectives of one micro-batch
    tp_collectives = 0.0
    cp_bytes = 0.0
    ep_bytes = 0.0
    for stack in shape.stacks:
        layer_s, core_s = _layer_forward_seconds(stack, layout, profile, flash)
        layers = stack.layers / layout.pp
        stage_forward += layers * (layer_s + OPS_PER_LAYER_FORWARD * profile.op_overhead_s)
        cores += layers * core_s
        recomputed = recomputed_layers(stack.layers, layout) / layout.pp
        recompute += recomputed * layer_s if layout.recompute == "full" else 0.0
        recompute += layers * core_s if layout.recompute == "selective" else 0.0
        activations = 2.0 * stack.tokens * layout.mbs / layout.cp * stack.hidden
        collectives = 4 + (2 if stack.cross_tokens else 0)  # per layer, forward and backward
        tp_bytes += layers * collectives * activations * 2  # an all-reduce is a reduce-scatter plus an all-gather
        tp_collectives += layers * collectives
        if stack.experts > 1:
            ep_bytes += layers * 4 * stack.topk * activations / layout.tp
        cp_bytes += layers * 3 * 2.0 * stack.tokens * layout.mbs * 2 * stack.kv_width / layout.tp  # K and V, fwd+bwd
    outside = (logits_forward_flops(shape) + shape.extra_flops_per_sample) * layout.mbs / (layout.tp * layout.cp)
    stage_forward += _matmul_seconds(outside, profile, layout)
    # The loss reads and writes every logit several times (16-bit logits, their fp32 copy, softmax statistics, the
    # gradient): a third of LOSS_BYTES_PER_LOGIT here, as the backward below counts twice the forward.
    logits = shape.output_tokens * layout.mbs / layout.cp * shape.vocab / layout.tp
    stage_forward += logits * LOSS_BYTES_PER_LOGIT / 3.0 / (profile.hbm_bytes_per_s * profile.hbm_efficiency)
    # backward = 2x forward; the forward passes recomputation adds; all micro-batches
    micro_batch_s = passes(layout) * stage_forward + recompute
    compute = m * micro_batch_s
    bubble = (layout.pp - 1) / layout.vp * micro_batch_s

    tp_nodes = layout.tp > per_node
    tensor = 0.0
    if not layout.tp_comm_overlap and layout.tp > 1:
        tensor = m * (
            _ring_seconds(tp_bytes, layout.tp, tp_nodes, profile) + tp_collectives * profile.collective_latency_s
        )
    # An all-to-all moves (n - 1) / n of its data, as a ring collective does; EP ranks sit beside the TP ranks.
    expert = m * _ring_seconds(ep_bytes, layout.ep, layout.tp * layout.ep > per_node, profile)
    ring = m * _ring_seconds(cp_bytes, layout.cp, layout.tp * layout.cp > per_node, profile)
    context = max(ring - 3.0 * m * cores, 0.0)

    pipeline = 0.0
    if layout.pp > 1:
        first = shape.stacks[0]
        sends = 2.0 * first.tokens * layout.mbs / layout.cp * first.hidden
        sends /= layout.tp if layout.sequence_parallel else 1  # scatter-gather: each TP rank sends its slice
        across = layout.tp * layout.cp * layout.data_parallel >= per_node and layout.nodes > 1
        bandwidth = profile.network_bytes_per_s if across else profile.nvlink_bytes_per_s
        pipeline = 2.0 * m * layout.vp * sends / bandwidth

    dense, experts = parameters_on_busiest_device(shape, layout)
    weights = dense + experts
    d = layout.data_parallel * layout.cp
    across_dp = layout.tp * layout.cp * layout.data_parallel > per_node
    latency = profile.collective_latency_s if d > 1 else 0.0
    gradient_sync = _ring_seconds(2.0 * weights, d, across_dp, profile) + latency  # reduce-scatter (all-reduce: half)
    weight_sync = _ring_seconds(2.0 * weights, d, across_dp, profile) + latency  # all-gather (all-reduce: 2nd half)
    hidden_behind = 2.0 * stage_forward if layout.overlap_grad_sync else 0.0
    exposed = max(gradient_sync - hidden_behind, 0.0)
    if layout.distributed_optimizer and layout.overlap_param_sync:
        exposed += max(weight_sync - stage_forward, 0.0)
    else:
        exposed += weight_sync
    if layout.frozen_base:  # no gradients to reduce and no optimizer state to update
        exposed, weights = 0.0, 0.0
    local = weights / (d if layout.distributed_optimizer else 1)
    optimizer = local * OPTIMIZER_BYTES_PER_WEIGHT / (profile.hbm_bytes_per_s * profile.hbm_efficiency)
    return StepTime(compute, bubble, tensor, context, pipeline, exposed, optimizer, expert_parallel_s=expert)
