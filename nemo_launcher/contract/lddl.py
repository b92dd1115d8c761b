"""LDDL's binned layout: what BERT's data preparation writes (`data_preparation.lddl`) and what BERT training with
`model.data.dataloader_type: LDDL` reads, and the rules both sides bind.

    binning = LddlBinning(output_dir="/data/lddl", target_seq_length=512, bin_size=64)   # data_preparation.lddl
    folders = lddl_folders(data.data_prefix, "training.model.data.data_prefix")    # (train, validation, test)
    check_bins(folders, positions=512, key="training.model.data.data_prefix")       # the bins on disk fit the model

The layout is NVIDIA LDDL's (github.com/NVIDIA/lddl, `preprocess_bert_pretrain --bin-size` then
`balance_dask_output`): one folder per split, in it `shard-<n>.parquet_<bin>` files whose rows are sentence
pairs (`A`, `B`: WordPiece pieces joined by spaces; `is_random_next`; `num_tokens`, [CLS] and both [SEP] counted;
`bin_id`). Bin b holds the samples of b * bin_size + 1 to (b + 1) * bin_size tokens, so a batch drawn from one bin
is padded to (b + 1) * bin_size at most. Our preparation also writes `lddl_bins.json` into each split folder: the
bin size and count, which LDDL's own files do not record, so the launcher can hold them to the model before the
queue wait. Folders without it (made by the lddl package itself) are checked by the job from the rows.

Torch-free and pyarrow-free: the launcher imports it.
"""

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence

from .binding import config_fault, field_fault, positive
from .schemas.common_training import check_splits

SPLITS = ("train", "validation", "test")  # data_prefix's order, as the seed lists its three folders
SHARD_GLOB = "shard-*.parquet_*"
BINS_FILE = "lddl_bins.json"
LDDL = "LDDL"  # the model.data.dataloader_type that selects this layout
_SHARD = re.compile(r"^shard-(\d+)\.parquet_(\d+)$")
# [CLS] A [SEP] B [SEP]: the fewest tokens of a sentence pair (one piece each side).
SHORTEST_PAIR = 5


def shard_file(shard: int, bin_id: int) -> str:
    """LDDL's name of shard `shard`'s file of bin `bin_id` (its load balancer writes shard-<i>.parquet_<bin>)."""
    return f"shard-{shard}.parquet_{bin_id}"


def shard_marker(output_dir: str, number: int) -> str:
    """The file whose presence says Pile shard `number` is binned in every split (LDDL's *.parquet* readers skip
    it); the binning step writes it last."""
    return os.path.join(output_dir, f".shard-{number}.done.json")


def bin_of(num_tokens: int, bin_size: int, bins: int) -> int:
    """LDDL's bin of a sample of `num_tokens` tokens: (num_tokens - 1) // bin_size, the last bin taking the rest."""
    return min((num_tokens - 1) // bin_size, bins - 1)


@dataclasses.dataclass(frozen=True)
class LddlBinning:
    """`data_preparation.lddl`: sentence pairs cut from the extracted Pile shards, binned by length, written per split
    in LDDL's layout. null (the default) writes no LDDL data."""

    output_dir: str  # <output_dir>/{train,validation,test}/shard-<file number>.parquet_<bin>
    target_seq_length: int = 512  # longest sample in tokens, [CLS] and both [SEP] included (LDDL's default 128)
    bin_size: int = 64  # tokens per bin; must divide target_seq_length (LDDL's rule)
    splits_string: str = "949,45,5"  # train,validation,test weights: each document goes to one split
    short_seq_prob: float = 0.1  # share of pairs cut to a random shorter target, as BERT's data does
    duplicate_factor: int = 1  # passes over each document, each cutting its pairs afresh (LDDL's default 5)
    seed: int = 12345  # pair cuts, segment swaps and split assignment derive from it and the file number

    def check(self, key: str) -> None:
        positive(f"{key}.target_seq_length", self.target_seq_length)
        positive(f"{key}.bin_size", self.bin_size)
        positive(f"{key}.duplicate_factor", self.duplicate_factor)
        if self.target_seq_length < SHORTEST_PAIR:
            raise field_fault(
                self, key, "target_seq_length", f"a pair needs [CLS] A [SEP] B [SEP]: at least {SHORTEST_PAIR}"
            )
        if self.bin_size > self.target_seq_length or self.target_seq_length % self.bin_size:
            raise field_fault(
                self,
                key,
                "bin_size",
                f"must divide target_seq_length ({self.target_seq_length}) into whole bins, e.g. "
                f"{_a_divisor(self.target_seq_length)}",
            )
        check_splits(f"{key}.splits_string", self.splits_string)
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise field_fault(self, key, "short_seq_prob", "must be in [0, 1], e.g. 0.1")

    @property
    def bins(self) -> int:
        return self.target_seq_length // self.bin_size

    def split_dirs(self) -> list[str]:
        return [os.path.join(self.output_dir, split) for split in SPLITS]

    def record(self) -> dict:
        """What lddl_bins.json says about every split folder."""
        return {"bin_size": self.bin_size, "bins": self.bins, "target_seq_length": self.target_seq_length}


def _a_divisor(length: int) -> int:
    """A bin size that divides `length`: the largest power of two up to 64 that does (1 at worst)."""
    size = 64
    while length % size:
        size //= 2
    return size


def lddl_folders(data_prefix, key: str) -> tuple[str, str, str]:
    """data_prefix as the seed writes it for LDDL: the train, validation and test folders, in that order."""
    if (
        not isinstance(data_prefix, Sequence)
        or isinstance(data_prefix, str)
        or len(data_prefix) != len(SPLITS)
        or not all(isinstance(folder, str) and folder for folder in data_prefix)
    ):
        raise config_fault(
            key,
            data_prefix,
            "dataloader_type LDDL reads three binned LDDL folders, [train, validation, test], e.g. "
            "[/data/lddl/train,/data/lddl/validation,/data/lddl/test] (data preparation's lddl.output_dir)",
        )
    for folder in data_prefix:
        if folder.endswith((".bin", ".idx")):
            raise config_fault(key, data_prefix, f"{folder} is an indexed dataset; LDDL reads folders of parquet bins")
    return tuple(data_prefix)


def bins_on_disk(folder: str) -> dict[int, list[str]] | None:
    """{bin id: its shard files} in `folder`; None when this host cannot list the folder."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    found: dict[int, list[str]] = {}
    for name in sorted(names):
        match = _SHARD.match(name)
        if match:
            found.setdefault(int(match.group(2)), []).append(os.path.join(folder, name))
    return found


def read_bins_record(folder: str) -> dict | None:
    """The folder's lddl_bins.json, or None where there is none (or it is unreadable: the job then checks rows)."""
    try:
        with open(os.path.join(folder, BINS_FILE), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    fields = ("bin_size", "bins", "target_seq_length")
    return record if isinstance(record, dict) and all(isinstance(record.get(f), int) for f in fields) else None


def check_bins(folders: Sequence[str], positions: int, key: str) -> None:
    """What this host sees of the LDDL folders must be trainable: binned shards whose bins are 0, 1, ... with none
    missing (LDDL's own rule), as many as lddl_bins.json says, and whose last bin ends within the model's learned
    positions. A folder this host cannot list is left to the launcher's input check and to the job."""
    for split, folder in zip(SPLITS, folders):
        found = bins_on_disk(folder)
        if found is None:
            continue
        if not found:
            raise config_fault(
                key,
                list(folders),
                f"{folder} (the {split} folder) holds no binned LDDL shards ({SHARD_GLOB}); run the BERT data "
                "preparation with lddl (data_preparation=bert/download_bert_pile_lddl), or name the folder it wrote",
            )
        record = read_bins_record(folder)
        expected = list(range(record["bins"] if record else max(found) + 1))
        missing = [b for b in expected if b not in found]
        if missing or sorted(found) != expected:
            raise config_fault(
                key,
                list(folders),
                f"{folder} (the {split} folder) holds bins {sorted(found)}, but LDDL needs bins {_span(expected)} "
                f"(missing: {missing or 'none'}, extra: {[b for b in found if b not in expected] or 'none'}); "
                "rerun its data preparation, which redoes only the shards without every bin",
            )
        if record and record["target_seq_length"] > positions:
            raise config_fault(
                key,
                list(folders),
                f"the last bin of {folder} ends at {record['target_seq_length']} tokens ({record['bins']} bins of "
                f"{record['bin_size']}), above the model's {positions} positions (max_position_embeddings): raise "
                f"max_position_embeddings and encoder_seq_length to {record['target_seq_length']}, or prepare "
                f"the data with lddl.target_seq_length <= {positions}",
            )


def check_prepared_bins(data_section: Mapping, training_section: Mapping, source: str) -> None:
    """A BERT training with dataloader_type LDDL that reads what a data preparation bins (resolved sections): the
    last bin must end within the model's positions."""
    binning = data_section.get("lddl")
    model = training_section.get("model") or {}
    if not isinstance(binning, Mapping) or (model.get("data") or {}).get("dataloader_type") != LDDL:
        return
    target, positions = binning.get("target_seq_length"), model.get("max_position_embeddings")
    if isinstance(target, int) and isinstance(positions, int) and target > positions:
        raise config_fault(
            "training.model.max_position_embeddings",
            positions,
            f"{source} bins pairs of up to {target} tokens (lddl.target_seq_length): raise max_position_embeddings "
            f"and encoder_seq_length to {target}, or lower data_preparation.lddl.target_seq_length to {positions}",
        )


def _span(bins: list[int]) -> str:
    return f"0-{bins[-1]}" if bins else "(none)"
