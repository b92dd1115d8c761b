"""The performance model's word on each training-like job: in the plan, in the ledger, and against what it measured.

    prediction = predict(stage, resolved_section, context)   # a dict (Estimate.as_json()), or None
    plan_lines(jobs)           # the plan's "Predicted" block

The model itself is contract/performance (torch-free); this module only decides when to ask it, refuses a job that
would not fit in its GPUs' memory (unless memory_check=false), and turns its numbers into words. The refusal is made
while the plan is built, so nothing is written or queued for a pipeline whose training would die of an
out-of-memory error after the queue wait.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from ..contract.performance import estimate_job
from .errors import ConfigError

DEFAULT_GPU_TYPE = "a100-80gb"  # the seeds' figures are A100 80 GB's


def gpu_type_of(context) -> str:
    return (context.cluster or {}).get("gpu_type") or DEFAULT_GPU_TYPE


def predict(
    stage: str, section: Mapping[str, Any], context, base_model: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The job's prediction on the cluster's GPUs, or None where the model has nothing to model (a section with
    no transformer or UNet it knows; a tuning section without the `base_model` it starts from). A job predicted not
    to fit carries the refusal, its breakdown and the fixes under `does_not_fit` (refuse_what_does_not_fit)."""
    trainer = section.get("trainer") or {}
    if trainer.get("accelerator") == "cpu":
        return None  # a GPU's figures say nothing of a CPU run, and the launcher cannot time this host's CPU
    if not isinstance(trainer.get("num_nodes"), int):
        # The node count is set when the job starts (BCP's $NGC_ARRAY_SIZE): how far the distributed optimizer
        # shards, hence the memory, is not known yet.
        return None
    gpu_type = gpu_type_of(context)
    price = (context.cluster or {}).get("gpu_hour_price")
    estimate = estimate_job(section, gpu_type=gpu_type, gpu_hour_price=price, base_model=base_model)
    if estimate is None:
        return None
    prediction = estimate.as_json()
    if not estimate.fits:
        # The breakdown's own last line repeats the total the sentence starts with.
        breakdown = [line for line in estimate.memory_breakdown_lines() if not line.startswith("total")]
        fixes = " or ".join(estimate.fixes())
        prediction["does_not_fit"] = (
            f"{stage}: predicted {prediction['memory_per_gpu_gib']:.1f} GiB per GPU does not fit the "
            f"{prediction['gpu_memory_gib']:.0f} GiB of cluster.gpu_type={gpu_type} ({'; '.join(breakdown)}): "
            f"{fixes + ', ' if fixes else ''}or set memory_check=false to submit it anyway"
        )
    return prediction


def refuse_what_does_not_fit(specs_by_stage, context) -> None:
    """The memory check, made once every other rule of the pipeline has passed: a wrong path or layout is named
    before the memory it would have needed."""
    if not context.memory_check:
        return
    for specs in specs_by_stage:
        for spec in specs:
            if spec.prediction is not None and spec.prediction.get("does_not_fit"):
                raise ConfigError(spec.prediction["does_not_fit"])


def _hours(days: float) -> str:
    hours = days * 24
    return f"{hours:.1f} h" if hours < 48 else f"{days:.1f} days"


def _count(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def describe(prediction: Mapping[str, Any]) -> str:
    """One line: parameters, memory per GPU of the GPU's size, step time, tokens/s, MFU, time, GPU-hours, cost."""
    cost = prediction.get("cost")
    fits = "" if prediction["fits"] else " (DOES NOT FIT)"
    words = [
        f"{_count(prediction['parameters'])} parameters",
        f"memory/GPU {prediction['memory_per_gpu_gib']:.1f} of {prediction['gpu_memory_gib']:.0f} GiB "
        f"(weights+optimizer {prediction['weights_and_optimizer_gib']:.1f}, "
        f"activations {prediction['activations_gib']:.1f}){fits}",
        f"step {prediction['step_time_s']:.3g} s",
        f"{_count(prediction['tokens_per_s'])} tokens/s",
        f"MFU {100 * prediction['mfu']:.0f}%",
    ]
    if prediction.get("gpu_hours") is not None:
        words.append(f"{_hours(prediction['days_to_train'])} to train")
        words.append(f"{prediction['gpu_hours']:,.0f} GPU-hours" + (f" (${cost:,.0f})" if cost is not None else ""))
    return ", ".join(words)


def plan_lines(jobs: Iterable, gpu_type: str) -> list[str]:
    """The plan's block of predictions, one line per job that has one; nothing when none has."""
    lines = [
        f"  {job.spec.stage} {job.spec.name}: {describe(job.spec.prediction)}"
        for job in jobs
        if job.spec.prediction is not None
    ]
    return [f"Predicted on {gpu_type} (python3 -m nemo_launcher estimate ... --json for every figure):", *lines]
