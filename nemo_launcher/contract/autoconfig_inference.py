"""What the AutoConfigurator's GPT inference search hands its two job programs, and the rules both sides apply to a
setting. Torch-free (the launcher and the jobs import it).

    <results_dir>/inference/inference_manifest.json          written by the launcher, never rewritten while jobs run
    <results_dir>/inference/<setting>/inference_result.json  rank 0 of the benchmark: what it measured
    <results_dir>/inference/<setting>/candidate_status.json  and candidate_failure.<rank>.json, as for training
    <results_dir>/inference/final_summary/final_output.csv   the analysis job's summary

A setting is found by its `item` (Slurm array index, or its position in an interactive job's command list) and
everything it measured lives in its own directory, so the analysis never pairs numbers with settings by position.
The launcher checks every setting with `setting_problem` and the benchmark with `benchmark_problem` against the
`.nemo` it names; the benchmark program checks the archive it opened with the same two functions.
"""

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .performance.layout import Layout
from .performance.parameters import parameters_on_busiest_device
from .performance.shapes import shape_of_model

INFERENCE_MANIFEST_FILE = "inference_manifest.json"
RESULT_FILE = "inference_result.json"
DATA_TYPES = ("fp32", "fp16", "bf16")
BYTES_PER_VALUE = {"fp32": 4, "fp16": 2, "bf16": 2}
# Why PP > 1 is refused: generate.py and the benchmark run the model as one pipeline stage; a stage split over
# processes would need megatron-core's forward-only schedule around every generated token.
PIPELINE_REFUSAL = "the benchmark generates on one pipeline stage: use pipeline_parallel_sizes [1]"


@dataclass(frozen=True)
class Benchmark:
    input_len: int  # prompt tokens of every row
    output_len: int  # tokens generated for every row (no early stop: every setting does the same work)
    beam_width: int  # 1 only (no beam search)
    topk: int  # > 1: sample among the k likeliest tokens; 0 or 1 with topp 0: greedy
    topp: float  # > 0: sample within the smallest set of tokens holding this probability
    seed: int  # the prompts' random token ids and the sampling draw from it: every setting sees the same prompts


@dataclass(frozen=True)
class InferenceSetting:
    item: int
    name: str  # e.g. gpt3_tiny_tp_2_pp_1_bs_4
    run_dir: str  # its inference_result.json and status files
    tp: int
    pp: int
    batch_size: int  # prompts generated together


@dataclass(frozen=True)
class InferenceManifest:
    model_name: str  # the model's name in the summary (inference_settings.run.model_train_name)
    nemo_file: str  # the GPT archive every setting loads
    data_type: str  # fp32, fp16 or bf16
    benchmark: Benchmark
    final_summary: str  # <results_dir>/inference/final_summary
    settings: list[InferenceSetting]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def read_inference_manifest(path) -> InferenceManifest:
    values = json.loads(Path(path).read_text())
    settings = [InferenceSetting(**setting) for setting in values.pop("settings")]
    benchmark = Benchmark(**values.pop("benchmark"))
    return InferenceManifest(**values, benchmark=benchmark, settings=settings)


def setting_problem(tp: int, pp: int, heads: int, query_groups: int) -> str | None:
    """Why a model of `heads` attention heads (`query_groups` key/value groups) cannot run at TP x PP; None when it
    can."""
    if pp != 1:
        return f"PP {pp}: {PIPELINE_REFUSAL}"
    if heads % tp:
        return f"TP {tp} does not divide the {heads} attention heads"
    if query_groups % tp:
        return f"TP {tp} does not divide the {query_groups} query groups"
    return None


def benchmark_problem(benchmark: Benchmark, positions: int | None) -> tuple[str, object, str] | None:
    """(key under benchmark, value, fix) of the first setting the benchmark cannot run; None when all can.
    positions: the longest sequence the model takes (max_position_embeddings)."""
    if benchmark.beam_width != 1:
        return "beam_width", benchmark.beam_width, "beam search is not implemented: set 1 (top-k/top-p sampling)"
    if benchmark.topk < 0:
        return "topk", benchmark.topk, "must be 0 (no top-k) or a positive number of tokens"
    if not 0.0 <= benchmark.topp <= 1.0:
        return "topp", benchmark.topp, "must lie in [0, 1] (0: no top-p)"
    for key in ("input_len", "output_len"):
        if getattr(benchmark, key) < 1:
            return key, getattr(benchmark, key), "must be a positive number of tokens"
    total = benchmark.input_len + benchmark.output_len
    if positions is not None and total > positions:
        return (
            "output_len",
            benchmark.output_len,
            f"input_len + output_len = {total} exceeds the model's {positions} positions: shorten them",
        )
    return None


def memory_per_gpu_bytes(model: Mapping[str, Any], tp: int, batch: int, tokens: int, data_type: str) -> float | None:
    """Bytes one GPU of a TP group holds at the benchmark's longest forward (`tokens` positions, `batch` rows), by the
    performance model's parameter count; None when it cannot count the model. No key/value cache is kept, so the
    peak is the weights plus one layer's transient tensors plus the logits: the local layer spec materialises the
    attention scores and probabilities (heads/TP x tokens^2 a row), the MLP its TP share of the FFN width, and the
    logits are gathered over the whole vocabulary before the last position is read."""
    shape = shape_of_model(model, tp)
    if shape is None:
        return None
    (stack,) = shape.stacks
    value = BYTES_PER_VALUE[data_type]
    dense, experts = parameters_on_busiest_device(shape, Layout(tp=tp, precision=data_type))
    rows = batch * tokens
    layer = rows * (4 * stack.hidden + 2 * stack.ffn / tp) + 2 * batch * (stack.heads / tp) * tokens * tokens
    logits = rows * shape.vocab
    return (dense + experts) * value + (layer + logits) * value
