"""What every family's megatron-core datasets share: the blend, the splits, and how many samples each split needs.

    blend = resolve_blend(cfg)                       # [weight, prefix, ...] from data_prefix or the automatic blend
    sizes = dataset_sizes(cfg, batches)              # [train, validation, test] samples for the whole run
    check_splits(blend, cfg.model.data.splits_string)
    train, valid, test = recipe.build_datasets(cfg, tokenizer, sizes, blend)

Every family reads Megatron indexed datasets (.bin/.idx) and splits each file's documents train/validation/test
the way megatron-core's BlendedMegatronDatasetBuilder does.
"""

import os
import struct
from collections.abc import Sequence

from ..common.config import JobConfigError
from ..common.data_blend import auto_blend
from .schedule import BatchSchedule

SPLIT_NAMES = ("training", "validation", "test")


def resolve_blend(cfg) -> list:
    """[weight, prefix, ...] from model.data.data_prefix, or the automatic blend of run.preprocessed_dir."""
    key = "model.data.data_prefix"
    if cfg.model.data.data_prefix is not None:
        blend = cfg.model.data.blend()
    else:
        key = "run.preprocessed_dir"
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
        # megatron-core cannot map a 0-byte file and says only "cannot mmap an empty file", naming none.
        if os.path.getsize(prefix + ".bin") == 0:
            raise JobConfigError(
                f"{key}={prefix}: {prefix}.bin is empty (0 bytes), a dataset with no document; rerun its data "
                f"preparation on input that holds documents, or leave this prefix out of the blend"
            )
    return blend


def open_indexed(prefix: str):
    """megatron-core's IndexedDataset of `prefix`; one that cannot be opened is refused naming the prefix (the
    reader's own errors, such as a short .idx, name no file)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    # Built here, not at module level, so that importing this module does not import megatron-core (and torch).
    class _Opened(IndexedDataset):
        def __del__(self) -> None:
            # megatron-core's __del__ deletes what a failed __init__ never set, printing a traceback after our
            # one-line error; a whole object is cleaned up as megatron-core does it.
            if "index" in vars(self) and "bin_reader" in vars(self):
                super().__del__()

    try:
        return _Opened(str(prefix))
    except (OSError, ValueError, AssertionError, struct.error) as error:  # struct.error: an .idx cut short
        raise JobConfigError(
            f"model.data.data_prefix={prefix}: {prefix}.bin/.idx cannot be opened as a Megatron indexed dataset "
            f"({type(error).__name__}: {error}); rerun the data preparation that writes it"
        ) from None


def dataset_sizes(cfg, batches: BatchSchedule) -> list[int]:
    """Samples of [train, validation, test] the run reads: every step's batch, and limit_*_batches global batches
    (the same ones at every validation)."""
    return [
        batches.total_samples(cfg.trainer.max_steps),
        cfg.trainer.limit_val_batches * cfg.model.global_batch_size,
        cfg.trainer.limit_test_batches * cfg.model.global_batch_size,
    ]


def split_document_counts(splits_string: str, documents: int) -> list[int]:
    """Documents of a file in each split, computed as megatron-core's builder does (rounded book-ends)."""
    weights = [float(w) for w in splits_string.replace("/", ",").split(",")]
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    bounds = [0.0]
    for weight in weights:
        bounds.append(bounds[-1] + weight / total)
    return [int(round(hi * documents)) - int(round(lo * documents)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def check_splits(blend: list, splits_string: str) -> None:
    """Every file must give at least one document to each split of non-zero weight: megatron-core builds
    all of them and loops forever on an empty one (0 tokens per epoch never reach the samples asked)."""
    weights = [float(w) for w in splits_string.replace("/", ",").split(",")] + [0.0] * 3
    for prefix in blend[1::2]:
        documents = open_indexed(prefix).document_indices.shape[0] - 1
        counts = split_document_counts(splits_string, documents)
        for name, count, weight in zip(SPLIT_NAMES, counts, weights):
            if weight > 0 and count == 0:
                raise JobConfigError(
                    f"model.data.splits_string: {splits_string!r} gives the {name} split 0 of the {documents} "
                    f'documents in {prefix}; give it a larger weight (e.g. "90,5,5" for a small corpus) or 0'
                )


def megatron_split(splits_string: str) -> str:
    """splits_string as megatron-core's BlendedMegatronDatasetConfig.split reads it (commas only)."""
    return splits_string.replace("/", ",")


def megatron_blend(blend: list):
    """BlendedMegatronDatasetConfig.blend for [weight, prefix, ...]: the prefixes, and the weights when there
    are several (a single dataset is read without the BlendedDataset around it)."""
    prefixes = [str(p) for p in blend[1::2]]
    weights = [float(w) for w in blend[0::2]]
    return prefixes, weights if len(prefixes) > 1 else None


def dataset_description(blend: Sequence) -> str:
    parts = [f"{float(w):.3f} x {p}" for w, p in zip(blend[0::2], blend[1::2])]
    return ", ".join(parts)


def masked_word_piece_settings(cfg, tokenizer, blend: list) -> dict:
    """The keyword arguments megatron-core's masked word-piece dataset configs (BERT's and T5's) share, from a
    training config whose `model.data` has the masking keys."""
    model, data = cfg.model, cfg.model.data
    return dict(
        random_seed=model.seed,
        sequence_length=model.encoder_seq_length,
        blend=megatron_blend(blend),
        split=megatron_split(data.splits_string),
        path_to_cache=data.index_mapping_dir,
        tokenizer=tokenizer,
        masking_probability=data.masked_lm_prob,
        short_sequence_probability=data.short_seq_prob,
        masking_max_ngram=data.max_ngram_size,
        masking_do_full_word=data.whole_word_masking,
        masking_do_permutation=data.permutation,
        masking_use_longer_ngrams=data.favor_longer_ngrams,
        masking_use_geometric_distribution=data.geometric_dist,
    )
