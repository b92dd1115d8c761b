"""Step arithmetic with no state: learning rate and batch size as functions of the step.

Keeping these pure is what makes resuming exact: a restarted run recomputes the learning rate, the
global batch size and the number of samples already consumed from the step alone, so none of them
needs to be saved, and they cannot drift from what an uninterrupted run would have used.
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class CosineSchedule:
    """NeMo's CosineAnnealing: warm-up, cosine decay to min_lr, then min_lr for constant_steps.

    `step` is the number of optimizer steps already taken (0 for the first step).
      step < warmup_steps              lr * (step + 1) / (warmup_steps + 1)
      step < max_steps - constant      min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2
      otherwise                        min_lr
    """

    lr: float
    min_lr: float
    warmup_steps: int
    constant_steps: int
    max_steps: int

    def __post_init__(self):
        # The stage schema refuses such a config (common_training.check_schedule) before a job starts; a zero
        # here would divide by zero in __call__.
        assert self.decay_steps > 0, f"no cosine decay step: {self}"

    @property
    def decay_steps(self) -> int:
        return self.max_steps - self.warmup_steps - self.constant_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / (self.warmup_steps + 1)
        done = step - self.warmup_steps
        if done >= self.decay_steps:
            return self.min_lr
        return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * done / self.decay_steps))


@dataclasses.dataclass(frozen=True)
class BatchSchedule:
    """Global batch size per step, with Megatron's ramp-up.

    With rampup [start, increment, ramp_samples] the batch grows from `start` by `increment` each time
    another ramp_samples / ((global - start) / increment) samples have been consumed, until it reaches
    `global_batch_size`. The number of microbatches per step follows: batch / (micro x data-parallel).
    """

    global_batch_size: int
    micro_batch_size: int
    data_parallel_size: int
    rampup: list[int] | None = None  # [start, increment, ramp-up samples]

    def batch_size(self, consumed_samples: int) -> int:
        if self.rampup is None:
            return self.global_batch_size
        start, increment, ramp_samples = self.rampup
        increments = (self.global_batch_size - start) // increment
        if increments == 0:
            return self.global_batch_size
        samples_per_increment = ramp_samples / increments
        grown = start + int(consumed_samples / samples_per_increment) * increment
        return min(grown, self.global_batch_size)

    def microbatches(self, consumed_samples: int) -> int:
        return self.batch_size(consumed_samples) // (self.micro_batch_size * self.data_parallel_size)

    def consumed_samples(self, step: int) -> int:
        """Samples consumed by the first `step` optimizer steps (all data-parallel ranks together)."""
        if self.rampup is None:
            return step * self.global_batch_size
        consumed = 0
        for taken in range(step):
            size = self.batch_size(consumed)
            if size == self.global_batch_size:
                # The ramp is over: the remaining steps all take the full batch.
                return consumed + (step - taken) * size
            consumed += size
        return consumed

    def total_samples(self, max_steps: int) -> int:
        return self.consumed_samples(max_steps)
