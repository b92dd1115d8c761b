"""`status`'s step-time column: what the plan predicted for a job (predictions.py, kept in its ledger record) against
what the job measured of its own steps (contract/measured_steps.py), read without torch or the performance model."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..contract.measured_steps import read_measured_steps


def _measured(job: Mapping[str, Any]) -> dict[str, Any] | None:
    directory = job.get("measured_steps_dir")
    return read_measured_steps(Path(directory)) if directory else None


def step_time_words(job: Mapping[str, Any]) -> str:
    """A ledger job's predicted step time against the one it measured: `2.10 s / 2.31 s (+10%)`, `2.10 s / -`
    before its first logged step, `-` for a job without a prediction."""
    prediction = job.get("prediction")
    if not prediction:
        return "-"
    predicted = prediction["step_time_s"]
    record = _measured(job)
    if record is None:
        return f"{predicted:.3g} s / -"
    seconds = record["step_time_s"]
    return f"{predicted:.3g} s / {seconds:.3g} s ({100 * (seconds - predicted) / predicted:+.0f}%)"
