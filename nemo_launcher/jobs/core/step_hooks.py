"""Per-step hooks the reference's GPU keys ask for: the step timer, garbage collection in step, Nsight capture.

    callbacks = step_hooks(parts)          # [StepTimer, GarbageCollection?, NsysCapture?] for the Lightning Trainer

- StepTimer (exp_manager.step_timing_kwargs): each step's own time, the GPU waited for at its start and end when
  sync_cuda is set; `train_step_timing` is the mean of the last buffer_size steps.
- GarbageCollection (model.gc_interval): Python's collector is switched off and run every N steps on every rank
  at the same step, so no rank stalls a collective while the others wait for it.
- NsysCapture (model.nsys_profile): on the listed ranks, cudaProfilerStart before step start_step and
  cudaProfilerStop after end_step; the launcher runs those ranks under `nsys profile --capture-range=cudaProfilerApi`.
"""

import collections
import gc
import time
from collections.abc import Callable

import pytorch_lightning as pl
import torch


class StepTimer(pl.Callback):
    def __init__(self, sync_cuda: bool, buffer_size: int):
        self.sync_cuda = sync_cuda  # (a CPU has nothing to wait for)
        self.durations = collections.deque(maxlen=buffer_size)
        self._started = 0.0

    def _now(self) -> float:
        if self.sync_cuda and torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._started = self._now()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.durations.append(self._now() - self._started)

    def mean(self) -> float | None:
        return sum(self.durations) / len(self.durations) if self.durations else None


class GarbageCollection(pl.Callback):
    """At the end of training it says which steps it collected after and how many collections anything else
    started meanwhile (gc.callbacks sees every one): a stall a user blames on gc can be checked against that."""

    def __init__(self, interval: int, say: Callable[[str], None] | None = None):
        self.interval = interval
        self.say = say
        self.collected_after: list[int] = []  # global steps after which this hook collected
        self.other_collections = 0  # collections of any generation started elsewhere while training
        self._collecting = False
        self._was_enabled = True

    def _count(self, phase: str, info: dict) -> None:
        if phase == "start" and not self._collecting:
            self.other_collections += 1

    def _collect(self) -> None:
        self._collecting = True
        try:
            gc.collect()
        finally:
            self._collecting = False

    def on_train_start(self, trainer, pl_module) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._collect()
        gc.callbacks.append(self._count)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # global_step already counts the step that just ended, on every rank alike.
        if trainer.global_step % self.interval == 0:
            self._collect()
            self.collected_after.append(trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.say is not None:
            self.say(self.summary())

    def summary(self) -> str:
        steps = self.collected_after
        shown = steps if len(steps) <= 6 else [*steps[:3], "...", *steps[-2:]]
        where = f"after steps {', '.join(map(str, shown))}" if steps else "after no step"
        return (
            f"gc: model.gc_interval={self.interval}: collected in the training loop {where} ({len(steps)} in all); "
            f"automatic collection off, collections started elsewhere: {self.other_collections}"
        )

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self._count in gc.callbacks:
            gc.callbacks.remove(self._count)
        if self._was_enabled:
            gc.enable()


class NsysCapture(pl.Callback):
    def __init__(self, start_step: int, end_step: int, gen_shape: bool):
        self.start_step, self.end_step, self.gen_shape = start_step, end_step, gen_shape
        self._nvtx = None
        self.capturing = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.start_step and not self.capturing:
            torch.cuda.cudart().cudaProfilerStart()
            self._nvtx = torch.autograd.profiler.emit_nvtx(record_shapes=self.gen_shape)
            self._nvtx.__enter__()
            self.capturing = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # global_step already counts the step that just ended.
        if self.capturing and trainer.global_step - 1 >= self.end_step:
            self._stop()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.capturing:
            self._stop()

    def _stop(self) -> None:
        self._nvtx.__exit__(None, None, None)
        torch.cuda.cudart().cudaProfilerStop()
        self.capturing = False


def step_hooks(parts, say: Callable[[str], None] | None = None) -> list[pl.Callback]:
    """The hooks the config asks for (a family schema without these keys gets the timer alone); `say` prints a
    line of the job's output (rank 0's)."""
    cfg = parts.cfg
    timing = getattr(cfg.exp_manager, "step_timing_kwargs", None)
    hooks: list[pl.Callback] = [StepTimer(timing.sync_cuda, timing.buffer_size) if timing else StepTimer(False, 1)]
    interval = getattr(cfg.model, "gc_interval", 0)
    if interval > 0:
        hooks.append(GarbageCollection(interval, say))
    profile = getattr(cfg.model, "nsys_profile", None)
    if profile is not None and profile.enabled and parts.on_gpu and parts.placement.rank in profile.ranks:
        hooks.append(NsysCapture(profile.start_step, profile.end_step, profile.gen_shape))
    return hooks
