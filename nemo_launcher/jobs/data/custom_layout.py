"""Which raw files of a custom dataset each preprocessing node handles, and where their outputs go.

    assignment = balance_by_size(files, nodes=4)   # [[files of node 0], [files of node 1], ...]

Files go to nodes greedily by size, largest first, each to the node with the fewest bytes so far; within a
node every worker shares every file chunk by chunk, so a node's workers stay busy even with one large file.
Every array task computes the same assignment from the same config, so no mapping file has to be written
before submission (the seed's preprocess_worker_mapping is still written, for people to read).
"""

import gzip
import json
import os
import shutil

import zstandard

from ..steps.config import DataConfigError, StepConfig

_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".jsonl", ".json")


def raw_files(cfg: StepConfig) -> list[str]:
    files = cfg.bound.files()
    if not files:
        raise DataConfigError(
            "data_preparation.raw_dataset_files is empty: list the jsonl, json or json.gz files, "
            "e.g. data_preparation.raw_dataset_files=[/data/a.jsonl,/data/b.jsonl]"
        )
    missing = [path for path in files if not os.path.isfile(path)]
    if missing:
        raise DataConfigError(f"data_preparation.raw_dataset_files: not found: {', '.join(missing)}")
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
    is complete, so an interrupted run resumes its chunks instead of decompressing anew)."""
    if path.endswith(".gz"):
        opener = gzip.open
    elif path.endswith(".zst"):

        def opener(name, mode):
            return zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(open(name, "rb"))
    else:
        return path
    dest = os.path.join(scratch_dir, dataset_stem(path) + ".jsonl")
    if not os.path.isfile(dest):
        os.makedirs(scratch_dir, exist_ok=True)
        temporary = dest + ".tmp"  # one writer per file (its node's task); a killed run's leftover is overwritten
        with opener(path, "rb") as source, open(temporary, "wb") as out:
            shutil.copyfileobj(source, out, 16 << 20)
        os.replace(temporary, dest)
    return dest
