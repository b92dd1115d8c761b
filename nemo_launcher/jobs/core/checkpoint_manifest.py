"""Each checkpoint file's size and CRC-32: recorded when a save ends, checked before a resume.

    files = record(step_dir, rank, world_size)        # this rank's share: {"__1_0.distcp": {"bytes": .., "crc32": ..}}
    ...gather every rank's share on rank 0, which writes them all into the COMPLETE marker...
    problems = check(step_dir, files, rank, world_size)   # this rank's share: ["__1_0.distcp: size 512 instead of
                                                          #   4096 bytes", ".metadata: missing", ...]

The work is split between ranks by who wrote the file: torch.distributed.checkpoint names a rank's shards
`__<rank>_<n>.distcp`, so each rank hashes the shards it has just written, still in its own node's page cache, and
rank 0 also hashes the files nothing else claims (.metadata, common.pt, metadata.json, anything new). No rank reads
another node's shards, so the cost of a save grows with the largest rank's share, not with the whole checkpoint.

CRC-32 because it is the cheapest checksum that catches what damages checkpoints (truncation, zeroed or
overwritten blocks): measured on this project's 2-core CI machine, zlib.crc32 runs at 3.4 GiB/s, adler32 2.9,
sha1 1.6, sha256 1.5, blake2b 0.7 (benchmarks/checkpoint_verify.py times it in a real save). Nobody forges a
checkpoint against us, so a cryptographic hash would only cost time.

Standard library only, so the rules are tested on folders of plain files.
"""

import concurrent.futures
import os
import re
import zlib
from collections.abc import Iterable
from pathlib import Path

from ...contract import CHECKPOINT_COMPLETE_MARKER

_SHARD = re.compile(r"__(\d+)_\d+\.distcp")
_CHUNK_BYTES = 8 * 2**20  # large enough for full-speed reads, small enough to leave memory alone
_WORKERS = 4  # files hashed at once: a rank's writer threads' files, without crowding out the training's threads
_THREADED_BYTES = 64 * 2**20  # below this much in all, one thread is quicker


def owner(name: str, world_size: int) -> int:
    """The rank that hashes and checks `name`: a shard's writer (modulo the ranks there are now: a run resumed
    with fewer processes still checks every file), rank 0 for everything else."""
    shard = _SHARD.fullmatch(Path(name).name)
    return int(shard.group(1)) % world_size if shard else 0


def file_names(step_dir: Path) -> list[str]:
    """Every file of a checkpoint except its marker (and the marker's temporary), as paths relative to the folder."""
    names = []
    for folder, _, files in os.walk(step_dir):
        for name in files:
            relative = os.path.relpath(os.path.join(folder, name), step_dir)
            if relative not in (CHECKPOINT_COMPLETE_MARKER, f".{CHECKPOINT_COMPLETE_MARKER}.tmp"):
                names.append(relative)
    return sorted(names)


def crc32(path: Path) -> str:
    value = 0
    # Read into one buffer (no new bytes object per chunk), no larger than the file: zeroing 8 MiB for a 100-byte
    # .metadata would cost more than hashing it.
    buffer = bytearray(max(1, min(_CHUNK_BYTES, _size(path))))
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(buffer):
            value = zlib.crc32(view[:read], value)
    return f"{value:08x}"


def _each(function, step_dir: Path, names: list[str]) -> list:
    """function(name) for every file name, the files hashed side by side: zlib.crc32 and file reads release the GIL,
    and megatron-core writes two files per rank (torch_dist's thread_count), so two threads halve the time on a node
    with cores to spare. Small checkpoints go one file after another: starting threads would cost more than it saves."""
    if len(names) < 2 or sum(_size(step_dir / name) for name in names) < _THREADED_BYTES:
        return [function(name) for name in names]
    workers = min(len(names), _WORKERS)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="checkpoint-crc32") as pool:
        return list(pool.map(function, names))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # missing or unreadable: the check says so
        return 0


def record(step_dir: Path, rank: int = 0, world_size: int = 1) -> dict[str, dict]:
    """Size and checksum of the files `rank` owns in a checkpoint every rank has finished writing."""
    step_dir = Path(step_dir)
    names = [name for name in file_names(step_dir) if owner(name, world_size) == rank]
    entries = _each(lambda name: {"bytes": _size(step_dir / name), "crc32": crc32(step_dir / name)}, step_dir, names)
    return dict(zip(names, entries))


def check(step_dir: Path, files: dict[str, dict], rank: int = 0, world_size: int = 1) -> list[str]:
    """How the files `rank` owns differ from what the save recorded, one `<file>: <what>` per damaged file; [] when
    they match. Files the save did not record (none are written after the marker) are not judged."""
    names = [name for name in sorted(files) if owner(name, world_size) == rank]
    problems = _each(lambda name: _problem(Path(step_dir) / name, files[name]), Path(step_dir), names)
    return [f"{name}: {problem}" for name, problem in zip(names, problems) if problem]


def _problem(path: Path, expected: dict) -> str | None:
    try:
        size = path.stat().st_size
        if size != expected["bytes"]:
            return f"size {size} instead of {expected['bytes']} bytes"
        found = crc32(path)
    except FileNotFoundError:
        return "missing"
    except OSError as error:  # no permission, an I/O error of the disk: as unusable as a damaged file
        return f"unreadable ({error.strerror or error})"
    if found != expected["crc32"]:
        return f"checksum differs (crc32 {found} instead of {expected['crc32']})"
    return None


def merged(shares: Iterable[dict[str, dict]]) -> dict[str, dict]:
    """The shares of every rank as one record, sorted by file name."""
    files = {}
    for share in shares:
        files.update(share)
    return dict(sorted(files.items()))
