"""The prediction for one training-like job: memory per device, step time, throughput, MFU, time and cost.

    est = estimate_job(stage_section, gpu_type="a100-80gb", gpu_hour_price=2.5)   # None: nothing to model
    est.fits, est.memory_breakdown_lines(), est.fixes(), est.as_json()
    estimates = score_layouts(stage_section, [Layout(tp=2, pp=1, mbs=2), ...], "h100-80gb")

`stage_section` is a resolved stage config as the launcher writes it (run, trainer, model, exp_manager). The
model's sizes are read once per tensor-parallel size (the vocabulary is padded per TP), so scoring thousands of
layouts costs arithmetic only.
"""

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from .flops import model_flops_per_sample, recompute_flops_per_sample
from .gpus import DEFAULT_GPU_TYPE, GPU_PROFILES, DeviceProfile
from .layout import Layout, layout_of_stage
from .memory import GIB, activation_bytes, weights_and_optimizer_bytes
from .parameters import total_parameters
from .shapes import ModelShape, shape_of_model
from .step_time import StepTime, step_time

SECONDS_PER_DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class Estimate:
    job: str
    shape: ModelShape
    layout: Layout
    device: DeviceProfile
    parameters: int
    weights_and_optimizer_gib: float
    activations_gib: float
    overhead_gib: float
    flops_per_step: float  # model FLOPs (no recomputation), all devices
    hardware_flops_per_step: float  # with recomputation
    time: StepTime
    train_steps: int | None
    train_basis: str  # where train_steps comes from
    gpu_hour_price: float | None

    @property
    def memory_per_gpu_gib(self) -> float:
        return self.weights_and_optimizer_gib + self.activations_gib + self.overhead_gib

    @property
    def fits(self) -> bool:
        return self.memory_per_gpu_gib <= self.device.memory_gib

    @property
    def step_time_s(self) -> float:
        return self.time.total_s

    @property
    def tokens_per_s(self) -> float:
        return self.layout.gbs * self.shape.tokens_per_sample / self.step_time_s

    @property
    def samples_per_s(self) -> float:
        return self.layout.gbs / self.step_time_s

    @property
    def mfu(self) -> float:
        precision = "fp8" if self.layout.fp8 else self.layout.precision
        peak = self.device.peak(precision) * self.layout.devices
        return self.flops_per_step / (self.step_time_s * peak)

    @property
    def days_to_train(self) -> float | None:
        return None if self.train_steps is None else self.train_steps * self.step_time_s / SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float | None:
        days = self.days_to_train
        return None if days is None else days * 24.0 * self.layout.devices

    @property
    def cost(self) -> float | None:
        hours = self.gpu_hours
        return None if hours is None or self.gpu_hour_price is None else hours * self.gpu_hour_price

    def as_json(self) -> dict[str, Any]:
        def rounded(value, digits=3):
            return None if value is None else round(value, digits)

        layout = self.layout
        return {
            "job": self.job,
            "model": self.shape.kind,
            "gpu_type": self.device.name,
            "gpus": layout.devices,
            "layout": {
                "tp": layout.tp,
                "pp": layout.pp,
                "vp": layout.vp,
                "cp": layout.cp,
                "ep": layout.ep,
                "dp": layout.data_parallel,
                "mbs": layout.mbs,
                "gbs": layout.gbs,
                "micro_batches": layout.micro_batches,
                "sequence_parallel": layout.sequence_parallel,
                "recompute": layout.recompute,
                "distributed_optimizer": layout.distributed_optimizer,
            },
            "parameters": self.parameters,
            "weights_and_optimizer_gib": rounded(self.weights_and_optimizer_gib),
            "activations_gib": rounded(self.activations_gib),
            "overhead_gib": rounded(self.overhead_gib),
            "memory_per_gpu_gib": rounded(self.memory_per_gpu_gib),
            "gpu_memory_gib": self.device.memory_gib,
            "fits": self.fits,
            "flops_per_step": self.flops_per_step,
            "step_time_s": rounded(self.step_time_s, 4),
            "step_time_breakdown_s": self.time.as_json(),
            "tokens_per_s": rounded(self.tokens_per_s, 1),  # sequence positions: text tokens, image patches
            "samples_per_s": rounded(self.samples_per_s, 3),
            "mfu": rounded(self.mfu, 4),
            "train_steps": self.train_steps,
            "train_basis": self.train_basis,
            "days_to_train": rounded(self.days_to_train),
            "gpu_hours": rounded(self.gpu_hours, 1),
            "cost": rounded(self.cost, 2),
        }

    def memory_breakdown_lines(self) -> list[str]:
        layout = self.layout
        recompute = layout.recompute or "no"
        sharding = (
            f"distributed optimizer over DP {layout.data_parallel * layout.cp}"
            if layout.distributed_optimizer
            else "optimizer not distributed"
        )
        return [
            f"weights, gradients and optimizer state: {self.weights_and_optimizer_gib:.1f} GiB "
            f"({self.parameters / 1e9:.2f}B parameters over TP {layout.tp} x PP {layout.pp}"
            f"{f' x EP {layout.ep}' if layout.ep > 1 else ''}, "
            f"{sharding})",
            f"activations: {self.activations_gib:.1f} GiB (micro batch {layout.mbs}, {recompute} recomputation"
            f"{', sequence parallel' if layout.sequence_parallel and layout.tp > 1 else ''}"
            f"{f', {layout.pp} pipeline stages' if layout.pp > 1 else ''})",
            f"framework overhead: {self.overhead_gib:.1f} GiB",
            f"total: {self.memory_per_gpu_gib:.1f} GiB per GPU of {self.device.memory_gib:.1f} GiB "
            f"({self.device.name})",
        ]

    def fixes(self) -> list[str]:
        """Changes that bring the job within its device's memory, each checked with the model: every single change
        that does, or else one combination (changes joined by "and", the largest saving first) that does, or else
        that combination as far as it goes. Empty when nothing lowers the memory."""
        if self.fits:
            return []
        chain: dict[str, str] = {}  # the key a change sets -> the change (a later one replaces an earlier one)
        current = self
        for step in range(_MOST_CHANGES):
            options = []
            for key, text, layout in _candidate_fixes(current):
                other = _estimate(self.job, self.shape, layout, self.device, self.train_steps, self.train_basis, None)
                if other.memory_per_gpu_gib < current.memory_per_gpu_gib:
                    options.append((other.memory_per_gpu_gib, key, text, other))
            options.sort(key=lambda option: option[0])
            fitting = [text for _, _, text, other in options if other.fits]
            if step == 0 and fitting:
                return fitting
            if not options:
                break
            _, key, text, current = options[0]
            chain.pop(key, None)
            chain[key] = text
            if current.fits:
                break
        return [" and ".join(chain.values())] if chain else []


# How many changes one suggested combination may chain.
_MOST_CHANGES = 5


def _candidate_fixes(est: Estimate) -> list[tuple[str, str, Layout]]:
    """(the key a change sets, the change in words, the layout it gives) for each change worth trying."""
    layout, shape = est.layout, est.shape
    heads = min(stack.heads for stack in shape.stacks) if shape.stacks else 1
    layers = min(stack.layers for stack in shape.stacks) if shape.stacks else 1
    changes = []
    tp = layout.tp * 2
    tp_divides = heads % tp == 0 and layout.devices % (tp * layout.pp) == 0
    if shape.stacks and tp_divides and tp <= est.device.devices_per_node:
        key = "model.tensor_model_parallel_size"
        changes.append((key, f"raise {key} to {tp}", layout.replace(tp=tp)))
    pp = layout.pp * 2
    if shape.stacks and layers % pp == 0 and layout.devices % (layout.tp * pp) == 0:
        key = "model.pipeline_model_parallel_size"
        changes.append((key, f"raise {key} to {pp}", layout.replace(pp=pp)))
    granularity = "model.activations_checkpoint_granularity"
    if layout.recompute is None:
        changes.append((granularity, f"set {granularity}=selective", layout.replace(recompute="selective")))
    if layout.recompute != "full":
        full = layout.replace(recompute="full", recompute_method="uniform", recompute_layers=1)
        text = (
            f"set {granularity}=full with model.activations_checkpoint_method=uniform and "
            "model.activations_checkpoint_num_layers=1"
        )
        changes.append((granularity, text, full))
    if layout.tp > 1 and not layout.sequence_parallel:
        key = "model.sequence_parallel"
        changes.append((key, f"set {key}=true", layout.replace(sequence_parallel=True)))
    if not layout.distributed_optimizer:
        key = "model.optim.name"
        changes.append((key, f"set {key}=distributed_fused_adam", layout.replace(distributed_optimizer=True)))
    if layout.mbs > 1:
        key = "model.micro_batch_size"
        changes.append((key, f"lower {key} to {layout.mbs // 2}", layout.replace(mbs=layout.mbs // 2)))
    return changes


def _estimate(
    job: str,
    shape: ModelShape,
    layout: Layout,
    device: DeviceProfile,
    train_steps: int | None,
    train_basis: str,
    gpu_hour_price: float | None,
) -> Estimate:
    per_sample = model_flops_per_sample(shape, layout)
    recompute = recompute_flops_per_sample(shape, layout)
    return Estimate(
        job=job,
        shape=shape,
        layout=layout,
        device=device,
        parameters=total_parameters(shape),
        weights_and_optimizer_gib=weights_and_optimizer_bytes(shape, layout) / GIB,
        activations_gib=activation_bytes(shape, layout) / GIB,
        overhead_gib=device.framework_overhead_gib,
        flops_per_step=per_sample * layout.gbs,
        hardware_flops_per_step=(per_sample + recompute) * layout.gbs,
        time=step_time(shape, layout, device),
        train_steps=train_steps,
        train_basis=train_basis,
        gpu_hour_price=gpu_hour_price,
    )


def _device(gpu: str | DeviceProfile) -> DeviceProfile:
    if isinstance(gpu, DeviceProfile):
        return gpu
    if gpu not in GPU_PROFILES:
        raise ValueError(f"unknown gpu_type {gpu!r}; known: {', '.join(GPU_PROFILES)}")
    return GPU_PROFILES[gpu]


def _train_steps(stage: Mapping[str, Any]) -> tuple[int | None, str]:
    steps = (stage.get("trainer") or {}).get("max_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps, f"trainer.max_steps={steps}"
    return None, "trainer.max_steps is not set: no time to train"


def _job_name(stage: Mapping[str, Any]) -> str:
    return str((stage.get("run") or {}).get("name") or "training")


_ARCHITECTURE_KEYS = ("num_layers", "encoder_num_layers", "unet_config", "vision")


def model_to_count(stage_section: Mapping[str, Any], base_model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The model section to count. A fine-tuning or PEFT section names the model it starts from instead of its
    architecture (model.restore_from_path): the caller passes that model's section as `base_model` (the pipeline's
    training model section, or a .nemo's model_config.yaml: contract/model_facts.read_nemo_config), and the
    stage's own non-null keys (its batch, parallelism, PEFT settings) win. Without one there is nothing to count.
    The tuned model runs at the tuning set's max_seq_length (its samples are padded or cut to it), not at the length
    it was pretrained at."""
    model = dict(stage_section.get("model") or {})
    if base_model is None or any(key in model for key in _ARCHITECTURE_KEYS):
        return model
    counted = {**base_model, **{key: value for key, value in model.items() if value is not None}}
    length = ((model.get("data") or {}).get("train_ds") or {}).get("max_seq_length")
    if isinstance(length, int) and not isinstance(length, bool) and length > 0 and "encoder_seq_length" in counted:
        counted["encoder_seq_length"] = length
    return counted


def estimate_job(
    stage_section: Mapping[str, Any],
    gpu_type: str | DeviceProfile = DEFAULT_GPU_TYPE,
    gpu_hour_price: float | None = None,
    base_model: Mapping[str, Any] | None = None,
) -> Estimate | None:
    """The prediction for a resolved training-like stage config, or None when its model has no transformer or
    UNet to count (see model_to_count for a fine-tuning stage's `base_model`). An unknown gpu_type raises
    ValueError (the launcher checks cluster.gpu_type first)."""
    device = _device(gpu_type)
    model = model_to_count(stage_section, base_model)
    # the job runs with the keys it inherits from the model it starts from (recomputation, sequence parallelism)
    layout = layout_of_stage({**stage_section, "model": model})
    shape = shape_of_model(model, layout.tp)
    if shape is None:
        return None
    steps, basis = _train_steps(stage_section)
    return _estimate(_job_name(stage_section), shape, layout, device, steps, basis, gpu_hour_price)


def score_layouts(
    stage_section: Mapping[str, Any],
    layouts: Iterable[Layout],
    gpu: str | DeviceProfile = DEFAULT_GPU_TYPE,
    gpu_hour_price: float | None = None,
) -> list[Estimate]:
    """One Estimate per layout, in order; the model is read once per tensor-parallel size. Empty when the model
    has nothing to count."""
    device = _device(gpu)
    model = model_to_count(stage_section)
    steps, basis = _train_steps(stage_section)
    job = _job_name(stage_section)
    shapes: dict[int, ModelShape | None] = {}
    estimates = []
    for layout in layouts:
        if layout.tp not in shapes:
            shapes[layout.tp] = shape_of_model(model, layout.tp)
        shape = shapes[layout.tp]
        if shape is None:
            return []
        estimates.append(_estimate(job, shape, layout, device, steps, basis, gpu_hour_price))
    return estimates
