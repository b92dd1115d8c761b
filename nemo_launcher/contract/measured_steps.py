"""What a training run measured of its own steps, in one small JSON file beside its logs.

    <exp_manager.explicit_log_dir>/measured_steps.json
    {"step": 40, "max_steps": 100, "step_time_s": 0.41, "tokens_per_s": 9980.0, "world_size": 2,
     "peak_memory_gib": 61.2, "peak_rss_gib": 3.1, "updated": "2026-11-29T21:00:00+00:00"}

The trainer's rank 0 rewrites it at every log point (jobs/core/callbacks.py), so a reader sees the newest window's
step time while the job runs and the last one after it ends. `status` sets it beside the step time the plan
predicted; the AutoConfigurator's analysis reads each candidate's own file (never a position in a list of logs).
`peak_memory_gib` is the GPU's peak allocated memory (None off GPUs); `peak_rss_gib` the process's peak resident
memory, which is what a CPU run has instead. Standard library only: the launcher reads it without torch.
"""

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MEASURED_STEPS_FILE = "measured_steps.json"


def measured_steps_path(log_dir) -> Path:
    return Path(log_dir) / MEASURED_STEPS_FILE


def write_measured_steps(log_dir, record: Mapping[str, Any]) -> None:
    """Replaces the file in one rename, so a reader never sees half of it."""
    path = measured_steps_path(log_dir)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(dict(record), sort_keys=True) + "\n")
    os.replace(partial, path)


def read_measured_steps(log_dir) -> dict[str, Any] | None:
    """The newest record, or None when the run has not logged a step yet or the file is not a record (a run killed
    mid-write leaves only the partial file, which is never read)."""
    try:
        record = json.loads(measured_steps_path(log_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    step_time = record.get("step_time_s")
    if not isinstance(step_time, (int, float)) or not math.isfinite(step_time) or step_time <= 0:
        return None
    return record
