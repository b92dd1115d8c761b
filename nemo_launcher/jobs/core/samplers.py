"""The samplers that make resuming exact, and the DataLoader around them; any family's map-style dataset.

    sampler = StepBatchSampler(len(train), batches, max_steps, start_step=lambda: trainer.global_step, dp_rank=r)
    loader = make_loader(train, sampler, num_workers=2, pin_memory=True, seed=1234)

One "batch" of the training DataLoader is everything this data-parallel rank consumes in one optimizer
step (all its microbatches, concatenated); the LightningModule splits it (the recipe's split_microbatches).
The position in the data is a function of the step (BatchSchedule.consumed_samples), read when iteration
starts, so a resumed run reads exactly the samples an uninterrupted run would have read next: no sampler
state is saved.
"""

from collections.abc import Callable, Iterator

import torch

from .schedule import BatchSchedule


def _rank_slice(start: int, micro: int, dp_rank: int, dp_size: int, microbatches: int) -> list[int]:
    """Global sample numbers one rank takes from a global batch starting at `start`, Megatron's order:
    each microbatch slot holds micro x dp consecutive samples, rank r taking the r-th run of `micro`."""
    indices = []
    for slot in range(microbatches):
        first = start + slot * micro * dp_size + dp_rank * micro
        indices.extend(range(first, first + micro))
    return indices


class _Order:
    """Maps a global sample number to a dataset index: in order ("single"), or a fresh permutation of the
    dataset on every pass ("cyclic"), seeded by the pass number so any process can recompute it."""

    def __init__(self, length: int, shuffle_seed: int | None):
        self.length = length
        self.seed = shuffle_seed
        self._epoch = None
        self._permutation = None

    def __call__(self, sample: int) -> int:
        epoch, offset = divmod(sample, self.length)
        if self.seed is None:
            return offset
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._permutation = torch.randperm(self.length, generator=generator).tolist()
            self._epoch = epoch
        return self._permutation[offset]


class StepBatchSampler(torch.utils.data.Sampler):
    """Per optimizer step, the dataset indices this data-parallel rank consumes (its microbatches in order).

    `len()` is the whole run in steps: Lightning treats the run as one epoch and, when resuming, adds the
    restored batch count to what this sampler still yields, which then reaches max_steps exactly.
    """

    def __init__(
        self,
        dataset_length: int,
        batches: BatchSchedule,
        max_steps: int,
        start_step: Callable[[], int],
        dp_rank: int,
        shuffle_seed: int | None = None,
    ):
        super().__init__()
        self.batches = batches
        self.max_steps = max_steps
        self.start_step = start_step
        self.dp_rank = dp_rank
        self._order = _Order(dataset_length, shuffle_seed)

    def __len__(self) -> int:
        return self.max_steps

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step()
        consumed = self.batches.consumed_samples(step)
        while step < self.max_steps:
            microbatches = self.batches.microbatches(consumed)
            numbers = _rank_slice(
                consumed, self.batches.micro_batch_size, self.dp_rank, self.batches.data_parallel_size, microbatches
            )
            yield [self._order(n) for n in numbers]
            consumed += self.batches.batch_size(consumed)
            step += 1


class EvalBatchSampler(torch.utils.data.Sampler):
    """`limit` global batches from the start of an evaluation split, the same ones at every evaluation,
    so validation losses of different steps compare like with like."""

    def __init__(
        self, dataset_length: int, global_batch_size: int, micro_batch_size: int, dp_rank: int, dp_size: int, limit: int
    ):
        super().__init__()
        self.global_batch_size = global_batch_size
        self.micro = micro_batch_size
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.count = min(limit, dataset_length // global_batch_size)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[list[int]]:
        microbatches = self.global_batch_size // (self.micro * self.dp_size)
        for batch in range(self.count):
            yield _rank_slice(batch * self.global_batch_size, self.micro, self.dp_rank, self.dp_size, microbatches)


def make_loader(
    dataset, batch_sampler, num_workers: int, pin_memory: bool, seed: int, collate_fn: Callable | None = None
) -> torch.utils.data.DataLoader:
    """collate_fn: None stacks fixed-shape samples (torch's default); tuning pads each batch to its longest sample."""
    from ..common.helper_processes import ignore_stop_signals

    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        collate_fn=collate_fn,
        # scancel signals the workers too; they must outlive it until the rank has saved (helper_processes.py).
        worker_init_fn=ignore_stop_signals,
        # Workers outlive one pass, so each validation does not pay for starting them again.
        persistent_workers=num_workers > 0,
        # Starting an iterator draws a seed from this generator; from the global one it would shift the
        # dropout random stream of a resumed run against an uninterrupted one.
        generator=torch.Generator().manual_seed(seed),
    )
