"""megatron-core GPT datasets over the data blend, and the samplers that make resuming exact.

    train, valid, test = build_datasets(cfg, tokenizer, batches, on_rank=placement.rank)
    sampler = StepBatchSampler(len(train), batches, start_step=lambda: trainer.global_step, ...)

One "batch" of the training DataLoader is everything this data-parallel rank consumes in one optimizer
step (all its microbatches, concatenated); the LightningModule splits it. The position in the data is
a function of the step (BatchSchedule.consumed_samples), read when iteration starts, so a resumed run
reads exactly the samples an uninterrupted run would have read next: no sampler state is saved.
"""
import logging
import os
from typing import Callable, Iterator, List, Optional, Sequence

import torch

from ..common.config import JobConfigError
from ..common.data_blend import auto_blend
from ...contract.schemas.gpt_training import TrainingConfig
from .schedule import BatchSchedule

log = logging.getLogger(__name__)


def resolve_blend(cfg: TrainingConfig) -> List:
    """[weight, prefix, ...] from model.data.data_prefix, or the automatic blend of run.preprocessed_dir."""
    if cfg.model.data.data_prefix is not None:
        blend = cfg.model.data.blend()
    else:
        if not cfg.run.preprocessed_dir:
            raise JobConfigError("model.data.data_prefix: null needs run.preprocessed_dir to blend from")
        try:
            blend = auto_blend(cfg.run.preprocessed_dir, cfg.run.blending_alpha)
        except (FileNotFoundError, ValueError) as error:
            raise JobConfigError(f"run.preprocessed_dir: {error}") from None
    for prefix in blend[1::2]:
        for suffix in (".bin", ".idx"):
            if not os.path.isfile(prefix + suffix):
                raise JobConfigError(f"model.data.data_prefix: {prefix}{suffix} does not exist")
    return blend


SPLIT_NAMES = ("training", "validation", "test")


def split_document_counts(splits_string: str, documents: int) -> List[int]:
    """Documents of a file in each split, computed as megatron-core's builder does (rounded book-ends)."""
    weights = [float(w) for w in splits_string.replace("/", ",").split(",")]
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    bounds = [0.0]
    for weight in weights:
        bounds.append(bounds[-1] + weight / total)
    return [int(round(hi * documents)) - int(round(lo * documents)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def check_splits(blend: List, splits_string: str) -> None:
    """Every file must give at least one document to each split of non-zero weight: megatron-core builds
    all of them and loops forever on an empty one (0 tokens per epoch never reach the samples asked)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    weights = [float(w) for w in splits_string.replace("/", ",").split(",")] + [0.0] * 3
    for prefix in blend[1::2]:
        documents = IndexedDataset(str(prefix)).document_indices.shape[0] - 1
        counts = split_document_counts(splits_string, documents)
        for name, count, weight in zip(SPLIT_NAMES, counts, weights):
            if weight > 0 and count == 0:
                raise JobConfigError(
                    f"model.data.splits_string: {splits_string!r} gives the {name} split 0 of the {documents} "
                    f"documents in {prefix}; give it a larger weight (e.g. \"90,5,5\" for a small corpus) or 0"
                )


def build_datasets(cfg: TrainingConfig, tokenizer, batches: BatchSchedule, blend: List):
    """(train, validation, test) megatron-core datasets sized for the whole run; a split of weight 0 is None."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    data = cfg.model.data
    prefixes = [str(p) for p in blend[1::2]]
    weights = [float(w) for w in blend[0::2]]
    sizes = [
        batches.total_samples(cfg.trainer.max_steps),
        cfg.trainer.limit_val_batches * cfg.model.global_batch_size,
        cfg.trainer.limit_test_batches * cfg.model.global_batch_size,
    ]
    dataset_config = GPTDatasetConfig(
        random_seed=cfg.model.seed,
        sequence_length=cfg.model.encoder_seq_length,
        blend=(prefixes, weights if len(prefixes) > 1 else None),
        split=data.splits_string.replace("/", ","),
        path_to_cache=data.index_mapping_dir,
        tokenizer=tokenizer,
        reset_position_ids=data.reset_position_ids,
        reset_attention_mask=data.reset_attention_mask,
        eod_mask_loss=data.eod_mask_loss,
        # Without per-document masks the attention is plainly causal, which the layers build themselves;
        # a [1, s, s] mask per sample would cost s*s bytes of host memory and copies for nothing.
        create_attention_mask=data.reset_attention_mask,
    )
    check_splits(blend, data.splits_string)
    built = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, dataset_config).build()
    train, valid, test = built
    if train is None or len(train) == 0:
        raise JobConfigError(f"model.data.splits_string: {data.splits_string!r} leaves no training data")
    return train, valid, test


def _rank_slice(start: int, micro: int, dp_rank: int, dp_size: int, microbatches: int) -> List[int]:
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

    def __init__(self, length: int, shuffle_seed: Optional[int]):
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

    def __init__(self, dataset_length: int, batches: BatchSchedule, max_steps: int, start_step: Callable[[], int],
                 dp_rank: int, shuffle_seed: Optional[int] = None):
        super().__init__()
        self.batches = batches
        self.max_steps = max_steps
        self.start_step = start_step
        self.dp_rank = dp_rank
        self._order = _Order(dataset_length, shuffle_seed)

    def __len__(self) -> int:
        return self.max_steps

    def __iter__(self) -> Iterator[List[int]]:
        step = self.start_step()
        consumed = self.batches.consumed_samples(step)
        while step < self.max_steps:
            microbatches = self.batches.microbatches(consumed)
            numbers = _rank_slice(consumed, self.batches.micro_batch_size, self.dp_rank,
                                  self.batches.data_parallel_size, microbatches)
            yield [self._order(n) for n in numbers]
            consumed += self.batches.batch_size(consumed)
            step += 1


class EvalBatchSampler(torch.utils.data.Sampler):
    """`limit` global batches from the start of an evaluation split, the same ones at every evaluation,
    so validation losses of different steps compare like with like."""

    def __init__(self, dataset_length: int, global_batch_size: int, micro_batch_size: int, dp_rank: int,
                 dp_size: int, limit: int):
        super().__init__()
        self.global_batch_size = global_batch_size
        self.micro = micro_batch_size
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.count = min(limit, dataset_length // global_batch_size)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[List[int]]:
        microbatches = self.global_batch_size // (self.micro * self.dp_size)
        for batch in range(self.count):
            yield _rank_slice(batch * self.global_batch_size, self.micro, self.dp_rank, self.dp_size, microbatches)


def make_loader(dataset, batch_sampler, num_workers: int, pin_memory: bool, seed: int) -> torch.utils.data.DataLoader:
    from ..common.helper_processes import ignore_stop_signals

    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batch_sampler, num_workers=num_workers, pin_memory=pin_memory,
        # scancel signals the workers too; they must outlive it until the rank has saved (helper_processes.py).
        worker_init_fn=ignore_stop_signals,
        # Workers outlive one pass, so each validation does not pay for starting them again.
        persistent_workers=num_workers > 0,
        # Starting an iterator draws a seed from this generator; from the global one it would shift the
        # dropout random stream of a resumed run against an uninterrupted one.
        generator=torch.Generator().manual_seed(seed),
    )


def split_microbatches(batch: dict, micro_batch_size: int) -> List[dict]:
    """Views (no copies) of a step's concatenated samples, one dict per microbatch."""
    count = batch["tokens"].shape[0] // micro_batch_size
    return [{k: v[i * micro_batch_size:(i + 1) * micro_batch_size] for k, v in batch.items()} for i in range(count)]


def dataset_description(blend: Sequence) -> str:
    parts = [f"{float(w):.3f} x {p}" for w, p in zip(blend[0::2], blend[1::2])]
    return ", ".join(parts)
