"""The candidate layouts of a search: every (TP, PP, VP, CP, micro-batch, recomputation) the seed's rules allow.

    layouts, dropped = candidate_layouts(settings, shape)   # dropped: {reason: count}

The lists come from train_settings, or with `auto` from the seed's tables for GPT on 80 GB at sequence 2048
(seed-llm-inventory 6.4.3), which grow TP and PP with the model size. The rules a layout must pass are the ones
megatron-core enforces when it builds the model: TP x PP x CP divides the GPUs, TP divides the heads, PP divides
the layers (T5's two stacks count twice), the global batch splits into whole micro-batches on every data-parallel
rank, interleaving (VP) needs PP > 1 and layers per stage divisible by VP, full recomputation of k layers needs k
layers on a stage, and TP x PP lies in [min, max]_model_parallel_size. Whether a layout fits in memory is not a rule
here: the performance model decides that (scoring.py), so no run is launched only to die of an out-of-memory error.
"""

import itertools
from collections import Counter
from dataclasses import dataclass

from .settings import TrainSettings

# (largest size in B, TP list, PP range, micro-batch list, min MP, max MP): the seed's GPT grid, 80 GB, seq 2048.
_GPT_BANDS = (
    (1.0, (1, 2), (1, 1), (1, 2, 3, 4, 6, 8), 1, 8),
    (8.0, (1, 2, 4), (1, 1), (1, 2, 3, 4, 6, 8), 1, 8),
    (13.0, (1, 2, 4, 8), (1, 1), (1, 2, 3, 4, 6, 8), 1, 8),
    (23.0, (1, 2, 4), (1, 4), (1, 2, 4), 4, 8),
    (45.0, (2, 4, 8), (1, 4), (1, 2, 4), 8, 32),
    (95.0, (2, 4, 8), (1, 8), (1, 2, 4), 8, 64),
    (130.0, (2, 4, 8), (1, 16), (1, 2, 4), 16, 128),
    (195.0, (8,), (4, 16), (1, 2, 4), 32, 256),
    (float("inf"), (8,), (16, 130), (1, 2), 256, 2048),
)
# Above this size `auto` also tries full recomputation of every layer of a stage; below, activations fit anyway.
_FULL_RECOMPUTE_ABOVE_B = 20.0


@dataclass(frozen=True)
class ModelShape:
    family: str
    size_in_b: float
    num_layers: int  # per stack (T5: the encoder's, equal to the decoder's)
    num_attention_heads: int
    global_batch_size: int
    seq_length: int
    stacks: int = 1  # 2 for encoder-decoder models: PP splits both stacks


@dataclass(frozen=True, order=True)
class Layout:
    tp: int
    pp: int
    vp: int | None  # model chunks per pipeline rank; None: no interleaving
    cp: int
    mbs: int
    act_ckpt_layers: int  # 0: the base config's recomputation (selective for GPUs); k: full recompute of k layers

    def name(self) -> str:
        return (
            f"tp_{self.tp}_pp_{self.pp}_vp_{self.vp or 0}_cp_{self.cp}_mbs_{self.mbs}_act_ckpt_{self.act_ckpt_layers}"
        )

    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp


def _band(size_in_b: float):
    return next(band for band in _GPT_BANDS if size_in_b <= band[0])


def _pp_choices(low: int, high: int, layers: int) -> tuple[int, ...]:
    return tuple(pp for pp in range(low, high + 1) if layers % pp == 0)


def search_lists(settings: TrainSettings, shape: ModelShape) -> dict[str, tuple]:
    """The lists searched: train_settings' own, or the seed's table for the size where it says auto."""
    _, tp, (pp_low, pp_high), mbs, mp_low, mp_high = _band(shape.size_in_b)
    full = (shape.num_layers,) if shape.size_in_b > _FULL_RECOMPUTE_ABOVE_B else ()
    return {
        "tp": settings.tensor_parallel_sizes or tp,
        "pp": settings.pipeline_parallel_sizes or _pp_choices(pp_low, pp_high, shape.num_layers * shape.stacks),
        "vp": settings.virtual_pipeline_parallel_sizes or (None,),
        "cp": settings.context_parallel_sizes or (1,),
        "mbs": settings.micro_batch_sizes or mbs,
        "act": settings.act_ckpt_layers or (0, *full),
        "mp": (settings.min_model_parallel_size or mp_low, settings.max_model_parallel_size or mp_high),
    }


def rule_broken(layout: Layout, shape: ModelShape, gpus: int, mp_range: tuple[int, int]) -> str | None:
    """Why megatron-core (or the search's bounds) would refuse the layout, or None."""
    if gpus % layout.model_parallel():
        return f"TP x PP x CP does not divide the {gpus} GPUs"
    if shape.num_attention_heads % layout.tp:
        return f"TP does not divide the {shape.num_attention_heads} attention heads"
    if (shape.num_layers * shape.stacks) % layout.pp:
        return f"PP does not divide the {shape.num_layers * shape.stacks} layers"
    if not mp_range[0] <= layout.tp * layout.pp <= mp_range[1]:
        return f"TP x PP outside the model-parallel range {mp_range[0]}-{mp_range[1]}"
    data_parallel = gpus // layout.model_parallel()
    if shape.global_batch_size % (layout.mbs * data_parallel):
        return f"the global batch {shape.global_batch_size} does not split into micro-batches on every DP rank"
    if layout.vp is not None and (layout.pp == 1 or (shape.num_layers // layout.pp) % layout.vp):
        return "interleaving needs PP > 1 and layers per stage divisible by VP"
    if layout.act_ckpt_layers > shape.num_layers * shape.stacks // layout.pp:
        return "more recomputed layers than a pipeline stage holds"
    if shape.seq_length % (2 * layout.cp) and layout.cp > 1:
        return "CP needs the sequence to split into 2 x CP chunks"
    return None


def candidate_layouts(settings: TrainSettings, shape: ModelShape) -> tuple[list[Layout], Counter]:
    lists = search_lists(settings, shape)
    allowed: list[Layout] = []
    dropped: Counter = Counter()
    for tp, pp, vp, cp, mbs, act in itertools.product(
        lists["tp"], lists["pp"], lists["vp"], lists["cp"], lists["mbs"], lists["act"]
    ):
        layout = Layout(tp, pp, None if vp in (None, 1) else vp, cp, mbs, act)
        reason = rule_broken(layout, shape, settings.gpus, lists["mp"])
        if reason is None:
            allowed.append(layout)
        else:
            dropped[reason] += 1
    return sorted(set(allowed)), dropped
