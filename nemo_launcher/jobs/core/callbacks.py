"""Lightning callbacks: metrics and the progress line, and saving on schedule, at max_time or on a signal.

ProgressLogger runs first in every hook, so the line of a step is printed before that step's checkpoint
and before a stop. All decisions that need every rank (when to log, save or stop) are made from the
step number, or agreed on with one all-reduce, so no rank waits in a collective the others skip.
"""

import logging
import resource
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytorch_lightning as pl
import torch

from ...contract.measured_steps import write_measured_steps
from ...contract.stop_reasons import max_time_stop_reason, signal_stop_reason
from ..common.report import eta, remaining_seconds
from . import checkpoint_manifest
from .checkpoint_space import CheckpointSpace
from .checkpoints import FILES_KEY, CheckpointFolder, alone
from .optim import parameters_gathered
from .recipe import extra_loss_names, metric_name

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopTraining(Exception):
    """Raised after the checkpoint of a max_time or signal stop is written; the program exits 0 on it."""


class StepClock:
    """Wall time of the training steps in the current logging window, with pauses (validation,
    checkpoint saves) taken out, so step time and tokens/s describe training alone."""

    def __init__(self):
        self._start = time.perf_counter()
        self._excluded = 0.0
        self._steps = 0
        self._tokens = 0

    def restart(self) -> None:
        self._start, self._excluded, self._steps, self._tokens = time.perf_counter(), 0.0, 0, 0

    def exclude(self, seconds: float) -> None:
        self._excluded += seconds

    def count(self, tokens: int) -> None:
        self._steps += 1
        self._tokens += tokens

    def take(self):
        """(seconds, steps, tokens) since the last take, then a new window starts."""
        seconds = max(time.perf_counter() - self._start - self._excluded, 1e-9)
        window = (seconds, self._steps, self._tokens)
        self.restart()
        return window


class MetricsWriter:
    """Lightning loggers (TensorBoard, W&B) written directly, on rank 0 only, flushed at every point so a
    killed job's curves are complete up to its last logged step."""

    def __init__(self, loggers: list, is_rank_zero: bool):
        self.loggers = loggers if is_rank_zero else []
        self.is_rank_zero = is_rank_zero

    def write(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "flush"):
                experiment.flush()

    def say(self, line: str) -> None:
        if self.is_rank_zero:
            print(line, flush=True)

    def finalize(self, status: str) -> None:
        for logger in self.loggers:
            logger.finalize(status)


class ProgressLogger(pl.Callback):
    """Prints one line per log point, ending with the time left at the window's step time, and keeps the
    totals of this attempt for the closing summary."""

    def __init__(
        self,
        parts,
        writer: MetricsWriter,
        clock: StepClock,
        flops_per_token: float | None,
        peak_flops: float | None,
        step_timer=None,
    ):
        self.parts = parts
        self.writer = writer
        self.clock = clock
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops  # per GPU; None off GPUs or for GPUs missing from the table
        self.step_timer = step_timer  # step_hooks.StepTimer: train_step_timing over its last steps
        self._validation_started = 0.0
        self.first_step = 0  # the global step this attempt started from (the resumed checkpoint's)
        self.tokens = 0  # trained this attempt, all ranks together
        self.timed_tokens = 0  # the part of them in logged windows, which train_seconds times
        self.train_seconds = 0.0  # step time of this attempt's logged windows, pauses excluded
        self.last_loss: float | None = None  # of the newest logged window
        self.last_extra_losses: dict[str, float] = {}  # the recipe's other losses, same window
        self.last_loss_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.first_step = trainer.global_step
        self.clock.restart()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        record = pl_module.last_step
        cfg = self.parts.cfg
        step_tokens = record.global_batch_size * self.parts.sequences.tokens
        self.clock.count(step_tokens)
        self.tokens += step_tokens
        if record.step % cfg.trainer.log_every_n_steps and record.step != cfg.trainer.max_steps:
            return
        losses = self.parts.reduce_last_stage_means(record.losses)  # every rank takes part
        loss = losses[self.parts.loss_name]
        extras = {name: losses[name] for name in extra_loss_names(self.parts.recipe)}
        seconds, steps, tokens = self.clock.take()
        tokens_per_sec = tokens / seconds
        self.timed_tokens += tokens
        self.train_seconds += seconds
        self.last_loss, self.last_extra_losses, self.last_loss_step = loss, extras, record.step
        metrics = {
            "reduced_train_loss": loss,
            **{f"reduced_train_{metric_name(name)}": value for name, value in extras.items()},
            "lr": record.lr,
            "global_batch_size": float(record.global_batch_size),
            "consumed_samples": float(pl_module.consumed_samples),
            "tokens_per_sec": tokens_per_sec,
        }
        if cfg.exp_manager.log_step_timing:
            recent = self.step_timer.mean() if self.step_timer is not None else None
            metrics["train_step_timing"] = recent if recent is not None else seconds / steps
        if record.grad_norm is not None:
            metrics["grad_norm"] = float(record.grad_norm)
        line = (
            f"step={record.step}/{cfg.trainer.max_steps} loss={loss:.4f}{_extras_text(extras)} lr={record.lr:.3e} "
            f"global_batch_size={record.global_batch_size} microbatches={record.microbatches} "
            f"tokens_per_sec={tokens_per_sec:.0f} step_time={seconds / steps:.4f}s"
        )
        if self.flops_per_token and self.peak_flops:
            mfu = tokens_per_sec * self.flops_per_token / (self.parts.placement.world_size * self.peak_flops)
            metrics["mfu"] = mfu
            line += f" mfu={100 * mfu:.1f}%"
        line += f" eta={eta(remaining_seconds(seconds / steps, record.step, cfg.trainer.max_steps))}"
        self.writer.write(metrics, record.step)
        self.writer.say(line)
        if self.writer.is_rank_zero:
            self._write_measured(record.step, seconds / steps, tokens_per_sec)

    def _write_measured(self, step: int, step_time: float, tokens_per_sec: float) -> None:
        """The window's step time for `status` and the AutoConfigurator (contract/measured_steps.py)."""
        cfg = self.parts.cfg
        on_gpu = self.parts.on_gpu
        write_measured_steps(
            cfg.exp_manager.explicit_log_dir,
            {
                "step": step,
                "max_steps": cfg.trainer.max_steps,
                "step_time_s": step_time,
                "tokens_per_s": tokens_per_sec,
                "world_size": self.parts.placement.world_size,
                "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None,
                # Linux reports ru_maxrss in KiB.
                "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "updated": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        self.clock.exclude(time.perf_counter() - self._validation_started)
        if pl_module.last_val_losses is not None:
            step = trainer.global_step
            metrics, text = evaluation_report("val", pl_module.last_val_losses, self.parts.recipe)
            extra = {f"val_{name}": value for name, value in pl_module.last_val_metrics.items()}
            self.writer.write({**metrics, **extra}, step)
            self.writer.say(f"validation step={step} {text}" + "".join(f" {k}={v:.4f}" for k, v in extra.items()))


def _extras_text(extras: dict[str, float]) -> str:
    return "".join(f" {metric_name(name)}={value:.4f}" for name, value in extras.items())


def evaluation_report(split: str, losses: dict[str, float], recipe):
    """({"<split>_loss": .., "<split>_<other loss>": ..}, "<split>_loss=X <other loss>=Y") for validation and test."""
    main = losses[recipe.loss_names[0]]
    extras = {name: losses[name] for name in extra_loss_names(recipe)}
    metrics = {f"{split}_loss": main, **{f"{split}_{metric_name(name)}": value for name, value in extras.items()}}
    return metrics, f"{split}_loss={main:.4f}{_extras_text(extras)}"


class StopSignals:
    """Remembers SIGTERM/SIGUSR1 instead of dying on them, while training runs. Handlers only raise a flag:
    saving inside a handler could interrupt a collective half way. Outside the training loop (setup,
    the final evaluation) the previous handlers apply, so a job cancelled while it starts simply dies;
    it has nothing new to save yet."""

    def __init__(self):
        self.received: int | None = None
        # Taken before Lightning installs anything, so restore() gives back the program's own handlers.
        self._original = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        for signum, handler in self._original.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum, frame) -> None:
        self.received = signum


class CheckpointAndStop(pl.Callback):
    """Saves every N steps and at the last step; at max_time or after SIGTERM/SIGUSR1 saves and stops.

    The signal flag and the clock are combined across ranks with one all-reduce per step, so all ranks
    stop after the same step even when only some of them got the signal.
    """

    def __init__(
        self,
        parts,
        writer: MetricsWriter,
        clock: StepClock,
        folder: CheckpointFolder,
        signals: StopSignals,
        started_at: float,
        max_time_s: float | None,
    ):
        self.parts = parts
        self.writer = writer
        self.clock = clock
        self.folder = folder
        self.signals = signals
        self.started_at = started_at
        self.max_time_s = max_time_s
        self.stop_reason: str | None = None  # why training stopped before max_steps, once it has
        self.saved: Path | None = None  # the newest checkpoint this attempt wrote
        self.space = CheckpointSpace(folder, parts)

    def on_train_start(self, trainer, pl_module) -> None:
        # Lightning installs its own SIGTERM handler just before training; it broadcasts from inside the
        # handler, which can deadlock gloo and NCCL. Ours replace it for the whole loop.
        self.signals.install()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.signals.restore()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        exp = self.parts.cfg.exp_manager
        step = trainer.global_step
        reason = self._agreed_stop_reason()
        due = step % exp.checkpoint_callback_params.every_n_train_steps == 0 or step == self.parts.cfg.trainer.max_steps
        if exp.create_checkpoint_callback and (due or reason):
            self.save(trainer, step)
            # A signal that came in during a scheduled save (stop signals wait while saving) stops the run now: the
            # checkpoint just written serves, and Slurm's KillWait leaves no time for another step and save.
            reason = reason or self._agreed_stop_reason()
        if reason and step < self.parts.cfg.trainer.max_steps:
            self.stop_reason = reason
            self.writer.say(f"stopping after step={step}: {reason}")
            raise StopTraining(reason)

    def on_validation_end(self, trainer, pl_module) -> None:
        loss = pl_module_val_loss(trainer)
        if self.parts.placement.rank != 0 or loss is None:
            return
        step = trainer.global_step
        if self.folder.steps()[-1:] == [step]:
            self.folder.update_info(step, val_loss=loss)
            self._prune()

    def _prune(self) -> None:
        params = self.parts.cfg.exp_manager.checkpoint_callback_params
        # (the schema holds mode to the monitor's own direction: newest steps, lowest validation loss)
        self.folder.prune(params.save_top_k, getattr(params, "monitor", "step"))

    def _agreed_stop_reason(self) -> str | None:
        out_of_time = self.max_time_s is not None and time.monotonic() - self.started_at >= self.max_time_s
        flags = [1.0 if self.signals.received is not None else 0.0, 1.0 if out_of_time else 0.0]
        if self.parts.placement.world_size > 1:
            agreed = torch.tensor(flags, device=self.parts.device)
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            flags = agreed.tolist()
        if flags[0]:
            where = signal.Signals(self.signals.received).name if self.signals.received else "on another rank"
            return signal_stop_reason(where)
        if flags[1]:
            return max_time_stop_reason(self.parts.cfg.trainer.max_time)
        return None

    def save(self, trainer, step: int) -> None:
        """Every rank. A save that fails for lack of space or permission raises StorageFault (checkpoint_space.py);
        the complete checkpoints stay as they were."""
        started = time.perf_counter()
        rank_zero = self.parts.placement.rank == 0
        target = self.space.prepare(step)  # collective: also the barrier before anyone writes
        try:
            with parameters_gathered(self.parts.ddp_chunks):
                trainer.save_checkpoint(target, weights_only=False)  # every rank writes its shards; ends with a barrier
            files = self._recorded_files(target)
            if rank_zero:
                self.folder.mark_complete(
                    step,
                    {
                        "step": step,
                        "consumed_samples": self.parts.batches.consumed_samples(step),
                        "parallel_layout": dict(self.parts.layout),
                        # Lightning validates after this hook: a validation of these very weights labels them then
                        # (on_validation_end). Until it does, the older validation's loss would rank them wrongly.
                        "val_loss": None if _validates_at(trainer, step) else pl_module_val_loss(trainer),
                        FILES_KEY: files,
                    },
                )
        except BaseException as error:  # torch.distributed.checkpoint's CheckpointException is no Exception
            self.space.failed(step, error)
            raise
        if rank_zero:
            self.space.saved(step)
            self._prune()
        elapsed = time.perf_counter() - started
        self.clock.exclude(elapsed)
        self.saved = target
        self.writer.say(f"checkpoint step={step} saved to {target} in {elapsed:.1f}s")

    def _recorded_files(self, target: Path) -> dict[str, dict]:
        """Every rank: size and CRC-32 of the files it wrote (checkpoint_manifest.py says why the work is split so),
        all of them together on every rank. Collective."""
        placement = self.parts.placement
        share = checkpoint_manifest.record(target, placement.rank, placement.world_size)
        return checkpoint_manifest.merged(gather_objects(placement.world_size)(share))


def gather_objects(world_size: int):
    """share -> [every rank's share], by rank: torch.distributed.all_gather_object, or `alone` for one process."""
    if world_size == 1:
        return alone

    def gather(share):
        shares = [None] * world_size
        torch.distributed.all_gather_object(shares, share)
        return shares

    return gather


def _validates_at(trainer, step: int) -> bool:
    """Whether Lightning runs a validation once the hooks of `step` are done (validation every val_check_interval
    steps, counted over the run)."""
    return bool(trainer.limit_val_batches) and step % trainer.val_check_interval == 0


def pl_module_val_loss(trainer) -> float | None:
    """The newest validation loss (None before the first validation), recorded with each checkpoint."""
    return getattr(trainer.lightning_module, "last_val_loss", None)
