"""Which raw files of a custom dataset each preprocessing node handles, and where their outputs go.

    assignment = balance_by_size(files, nodes=4)   # [[files of node 0], [files of node 1], ...]

Files go to nodes greedily by size, largest first, each to the node with the fewest bytes so far; within a
node every worker shares every file chunk by chunk, so a node's workers stay busy even with one large file.
Every array task computes the same assignment from the same config, so no mapping file has to be written
before submission (the seed's preprocess_worker_mapping is still written, for people to read).
"""

import json
import logging
import os
import shutil

import zstandard

from ..steps.config import DataConfigError, StepConfig
from .compression import STDLIB_OPENERS, SUFFIX, compression_of

log = logging.getLogger(__name__)

_SUFFIXES = tuple(
    f"{kind}{packed}" for packed in (*SUFFIX.values(), "") for kind in (".jsonl", ".json")
)  # .jsonl.gz, .json.gz, ..., .jsonl, .json
RAW_FILES_KEY = "data_preparation.raw_dataset_files"


def raw_files(cfg: StepConfig) -> list[str]:
    files = cfg.bound.files()
    if not files:
        raise DataConfigError(
            "data_preparation.raw_dataset_files is empty: list the jsonl, json or json.gz files, "
            "e.g. data_preparation.raw_dataset_files=[/data/a.jsonl,/data/b.jsonl]"
        )
    missing = [path for path in files if not os.path.isfile(path)]
    if missing:
        raise DataConfigError(f"{RAW_FILES_KEY}: not found: {', '.join(missing)}")
    stems = [dataset_stem(path) for path in files]
    clashes = sorted({stem for stem in stems if stems.count(stem) > 1})
    if clashes:
        raise DataConfigError(
            f"data_preparation.raw_dataset_files: several files would write the same dataset "
            f"{clashes}; rename them so their names differ"
        )
    return files


def dataset_stem(path: str) -> str:
    name = os.path.basename(path)
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def balance_by_size(files: list[str], nodes: int) -> list[list[str]]:
    loads = [0] * nodes
    assignment: list[list[str]] = [[] for _ in range(nodes)]
    # Largest first, ties by name, so every task derives the identical assignment.
    for path in sorted(files, key=lambda p: (-os.path.getsize(p), p)):
        node = min(range(nodes), key=lambda n: (loads[n], n))
        assignment[node].append(path)
        loads[node] += os.path.getsize(path)
    return assignment


def write_mapping(path: str, assignment: list[list[str]]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        json.dump({str(node): files for node, files in enumerate(assignment)}, handle, indent=1)
    os.replace(temporary, path)


def plain_jsonl(path: str, scratch_dir: str) -> str:
    """`path` itself when it is plain text, else a decompressed copy in `scratch_dir` (kept until its dataset
    is complete, so an interrupted run resumes its chunks instead of decompressing anew).

    The compression is read from the file's first bytes, so a gzip, bz2 or xz file under a plain name is read
    too (with one log line saying so); a zstd file under a plain name is refused, since only the name decides
    whether the zstandard package is wanted."""
    kind = compression_of(path)
    if kind is None:
        return path
    announced = path.endswith(SUFFIX[kind])
    if kind == "zstd":
        if not announced:
            raise DataConfigError(
                f"{RAW_FILES_KEY}={path}: the file is zstd-compressed (its first bytes say so) but its name does "
                f"not end in .zst; rename it to {dataset_stem(path)}.jsonl.zst, or decompress it (zstd -d)"
            )

        def opener(name, mode):
            return zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(open(name, "rb"))
    else:
        opener = STDLIB_OPENERS[kind]
        if not announced:
            log.info("%s: %s-compressed (by its first bytes, not its name); reading it decompressed", path, kind)
    dest = os.path.join(scratch_dir, dataset_stem(path) + ".jsonl")
    if not os.path.isfile(dest):
        os.makedirs(scratch_dir, exist_ok=True)
        temporary = dest + ".tmp"  # one writer per file (its node's task); a killed run's leftover is overwritten
        with opener(path, "rb") as source, open(temporary, "wb") as out:
            shutil.copyfileobj(source, out, 16 << 20)
        os.replace(temporary, dest)
    return dest
