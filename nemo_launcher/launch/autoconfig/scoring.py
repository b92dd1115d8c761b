"""Each candidate layout scored by the performance model; those predicted not to fit in memory are dropped.

    device = device_profile(settings, base_section)        # a GPU profile, or this CPU measured now
    scored, dropped = score_candidates(base_section, layouts, device)   # fastest predicted first

The model (nemo_launcher/contract/performance) predicts memory per device and step time from the resolved base
training config with the candidate's layout; the launcher's memory refusal uses the same numbers, so a candidate
dropped here is one the launcher would refuse anyway.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...contract.performance import GPU_PROFILES, DeviceProfile, cpu_profile, layout_of_stage, score_layouts
from ..errors import LauncherError, config_error
from .grid import Layout
from .settings import PREFIX, TrainSettings


@dataclass(frozen=True)
class Scored:
    layout: Layout
    prediction: dict[str, Any]  # Estimate.as_json()

    @property
    def step_time_s(self) -> float:
        return self.prediction["step_time_s"]


def measure_cpu(hidden_size: int, tokens: int, threads: int) -> dict[str, float]:
    """The job side's cpu_rate program, run here once (the launcher itself never imports torch): the matrix-multiply
    rate, one operation's overhead and one collective's latency."""
    command = [sys.executable, "-m", "nemo_launcher.jobs.autoconfig.cpu_rate", "--size", str(hidden_size)]
    command += ["--tokens", str(tokens), "--threads", str(threads)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise LauncherError(f"measuring this CPU's rate for gpu_type=cpu failed: {last}")
    return {key: float(value) for key, value in json.loads(result.stdout).items()}


def device_profile(settings: TrainSettings, base_section: Mapping[str, Any]) -> DeviceProfile:
    if settings.gpu_type != "cpu":
        if settings.gpu_type not in GPU_PROFILES:
            raise config_error(
                f"{PREFIX}.gpu_type", settings.gpu_type, f"known: auto, cpu, {', '.join(sorted(GPU_PROFILES))}"
            )
        return GPU_PROFILES[settings.gpu_type]
    model = base_section.get("model") or {}
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    tokens = int(model.get("micro_batch_size") or 1) * int(model.get("encoder_seq_length") or 128)
    measured = measure_cpu(int(model.get("hidden_size") or 64), tokens, threads)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 / settings.gpus_per_node
    return cpu_profile(
        measured["flops_per_s"],
        memory_gib,
        processes_per_node=settings.gpus_per_node,
        op_overhead_s=measured["op_overhead_s"],
        collective_latency_s=measured["collective_latency_s"],
    )


def performance_layout(base, candidate: Layout, sequence_parallel: bool):
    """The performance model's Layout for a candidate on top of the base config's."""
    if candidate.act_ckpt_layers:
        recompute = {"recompute": "full", "recompute_method": "block", "recompute_layers": candidate.act_ckpt_layers}
    else:
        recompute = {}
    return base.replace(
        tp=candidate.tp,
        pp=candidate.pp,
        vp=candidate.vp or 1,
        cp=candidate.cp,
        mbs=candidate.mbs,
        sequence_parallel=sequence_parallel and candidate.tp > 1,
        **recompute,
    )


def score_candidates(
    base_section: Mapping[str, Any], layouts: list[Layout], device: DeviceProfile, sequence_parallel: bool
) -> tuple[list[Scored], Counter]:
    """(candidates predicted to fit, fastest predicted first; {reason: count} of the dropped)."""
    base = layout_of_stage(base_section)
    estimates = score_layouts(base_section, [performance_layout(base, c, sequence_parallel) for c in layouts], device)
    if not estimates:
        raise LauncherError("the performance model finds no transformer in the base config's model to score")
    kept, needs = [], []
    for layout, estimate in zip(layouts, estimates):
        if estimate.fits:
            kept.append(Scored(layout, estimate.as_json()))
        else:
            needs.append(estimate.memory_per_gpu_gib)
    dropped = Counter()
    if needs:
        low, high = f"{min(needs):.1f}", f"{max(needs):.1f}"
        need = f"{low} GiB" if low == high else f"{low} to {high} GiB"
        reason = f"predicted not to fit in {device.memory_gib:.0f} GiB per {device.name} device (needing {need})"
        dropped[reason] = len(needs)
    return sorted(kept, key=lambda s: (s.step_time_s, s.layout)), dropped
