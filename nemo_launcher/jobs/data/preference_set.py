"""What the two preference-set programs (preference_tiny, preference_comparisons) share: binding their config, the
tokenizer, and the parts of metadata.json every set has.

    cfg = load_preference_config(argv, "preference_tiny")    # --config <resolved data_preparation YAML>
    tokenizer = set_tokenizer(cfg)                            # the one the RLHF models must use too
    metadata = set_metadata(cfg, tokenizer, splits)           # tokenizer spec and vocab_size, counts per split
"""

from collections.abc import Sequence

from ...contract.binding import JobConfigError
from ...contract.schemas.preference_preparation import PreferencePreparation
from ..common.tokenizer import load_tokenizer
from ..steps.config import DataConfigError, load_bound


def load_preference_config(argv: Sequence[str] | None, step: str):
    return load_bound(PreferencePreparation, f"nemo_launcher.jobs.data.{step}", argv)


def set_tokenizer(cfg):
    """The configured tokenizer, loaded as the GPT jobs load model.tokenizer (so the ids agree)."""
    spec = cfg.tokenizer
    try:
        return load_tokenizer(
            spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file, key="data_preparation.tokenizer"
        )
    except JobConfigError as error:
        raise DataConfigError(str(error)) from None


def set_metadata(cfg, tokenizer, splits: dict[str, dict[str, int]]) -> dict:
    """metadata.json's common part: the dataset, the tokenizer (with vocab_size and eod, which the RLHF jobs check
    against their model's), and per count the value of each split: {"pairs": {"train": 256, ...}, ...}."""
    counts: dict[str, dict[str, int]] = {}
    for split, numbers in splits.items():
        for name, value in numbers.items():
            counts.setdefault(name, {})[split] = value
    return {
        "dataset": cfg.dataset,
        "tokenizer": cfg.tokenizer.spec() | {"vocab_size": tokenizer.vocab_size, "eod": tokenizer.eod},
        **counts,
        "sft_responses": cfg.sft_responses,
    }
