"""A torch-free performance model of training jobs: parameters, memory per device, FLOPs, step time, MFU, time and
cost, from a resolved stage config and a device profile.

    from nemo_launcher.contract.performance import estimate_job, Estimate, GPU_PROFILES, Layout, score_layouts

    est = estimate_job(stage_section, gpu_type="a100-80gb", gpu_hour_price=None)   # None: nothing to model
    est.fits, est.as_json(), est.memory_breakdown_lines(), est.fixes()

Modules, each one part of the model: gpus (device profiles), shapes (a model section as stacks and sizes; unet and
vocabulary help it), layout (how a job spreads over devices), parameters, memory, flops, step_time, estimate.
docs/performance-model.md describes the formulas, their sources and how the predictions compare with the seed's
published throughput.
"""

from .estimate import Estimate, estimate_job, score_layouts
from .gpus import DEFAULT_GPU_TYPE, GPU_PROFILES, DeviceProfile, cpu_profile, peak_bf16_flops
from .layout import Layout, layout_of_stage

__all__ = [
    "DEFAULT_GPU_TYPE",
    "GPU_PROFILES",
    "DeviceProfile",
    "Estimate",
    "Layout",
    "cpu_profile",
    "estimate_job",
    "layout_of_stage",
    "peak_bf16_flops",
    "score_layouts",
]
