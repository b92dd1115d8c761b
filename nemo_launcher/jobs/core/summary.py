"""The closing summary of a training attempt, any family.

    summary = training_summary(cfg, TrainingOutcome(step=40, first_step=20, ...), extra=[("model", "...")])
    summary.show(rank)

Standard library only (it is imported by programs before torch).
"""

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...contract.stop_reasons import stopped_title


@dataclasses.dataclass(frozen=True)
class TrainingOutcome:
    """What one attempt did, for its closing summary."""

    step: int  # the global step reached
    first_step: int  # the step this attempt resumed from (0: from scratch)
    tokens: int  # trained this attempt, all ranks together (T5: encoder and decoder tokens)
    tokens_per_sec: float | None  # over the training steps alone (validation and saving excluded)
    seconds: float  # this attempt's wall time, start-up included
    train_loss: float | None
    train_loss_step: int
    val_loss: float | None
    test_loss: float | None
    stop_reason: str | None  # set when a signal or max_time stopped it before max_steps
    newest_checkpoint: Path | None
    extra_train_losses: dict[str, float] = dataclasses.field(default_factory=dict)  # the recipe's other losses
    val_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # the last validation's other scores
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)  # what a completed run wrote: label -> path


def training_summary(cfg, outcome: TrainingOutcome, extra: Iterable[tuple[str, Any]] = ()):
    from ..common.report import Summary, count, duration

    exp = cfg.exp_manager
    max_steps = cfg.trainer.max_steps
    if outcome.stop_reason:
        follow_up = (
            "the next attempt resumes from its checkpoint"
            if exp.create_checkpoint_callback
            else "no checkpoint was saved (exp_manager.create_checkpoint_callback: false), so a rerun starts over"
        )
        title = stopped_title(outcome.step, max_steps, outcome.stop_reason, follow_up)  # `status` reads it back
    else:
        title = f"training finished at step={outcome.step} of {max_steps}"
    done = outcome.step - outcome.first_step
    steps = f"{done} this attempt" + (f" (resumed from step {outcome.first_step})" if outcome.first_step else "")
    rate = f" ({count(outcome.tokens_per_sec)} tokens/s)" if outcome.tokens_per_sec else ""
    summary = Summary(title).add("steps", steps).add("tokens", f"{count(outcome.tokens)}{rate}")
    summary.add("time", duration(outcome.seconds))
    if outcome.train_loss is not None:
        summary.add("train loss", f"{outcome.train_loss:.4f} (step {outcome.train_loss_step})")
    for name, value in outcome.extra_train_losses.items():
        summary.add(f"train {name}", f"{value:.4f} (step {outcome.train_loss_step})")
    summary.add("val loss", None if outcome.val_loss is None else f"{outcome.val_loss:.4f}")
    summary.add("test loss", None if outcome.test_loss is None else f"{outcome.test_loss:.4f}")
    for name, value in outcome.val_metrics.items():
        summary.add(f"val {name}", f"{value:.4f}")
    for label, path in outcome.outputs.items():
        summary.add(label, path)
    for key, value in extra:
        summary.add(key, value)
    if exp.create_checkpoint_callback:
        newest = outcome.newest_checkpoint
        summary.add(
            "checkpoints",
            f"{Path(exp.explicit_log_dir) / 'checkpoints'}"
            + (f" (newest: {newest.name})" if newest is not None else " (none complete)"),
        )
    summary.add("TensorBoard", exp.explicit_log_dir if exp.create_tensorboard_logger else None)
    return summary
