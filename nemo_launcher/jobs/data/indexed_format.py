"""The Megatron indexed dataset files (`<prefix>.bin` + `<prefix>.idx`), written without megatron or torch.

`.bin` is every token of every document back to back, in the token dtype. `.idx` is what
megatron.core.datasets.indexed_dataset (_IndexWriter / _IndexReader, megatron-core 0.16) reads, little-endian:

    9 bytes   b"MMIDIDX\\x00\\x00"
    u64       version, always 1
    u8        dtype code (uint8 1, int8 2, int16 3, int32 4, int64 5, float64 6, float32 7, uint16 8)
    u64       sequence count S
    u64       document count D + 1 (the length of document_indices, which starts with 0)
    i32 * S   tokens per sequence
    i64 * S   byte offset of each sequence in .bin
    i64 * D+1 document_indices: sequence index where each document ends, after a leading 0

Writing it here lets the workers emit plain numpy arrays (no per-document Python objects, no torch), and the
tests check the result is byte-identical to IndexedDatasetBuilder's. A GPT document is one sequence, as
Megatron-LM's tools/preprocess_data.py writes it without sentence splitting; BERT and T5 data has one sequence
per sentence, and document_indices says where each document's sentences end (--split-sentences).
"""

import contextlib
import os
import shutil
import struct
from collections.abc import Iterable

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
_VERSION = 1
_DTYPE_CODES = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}
_CODE_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}
_FIXED = len(HEADER) + 8 + 1 + 8 + 8


def write_index(
    path: str, dtype: np.dtype, sequence_lengths: np.ndarray, sequences_per_document: np.ndarray | None = None
) -> None:
    """Write the .idx for sequences of the given token counts; without `sequences_per_document` every sequence
    is a document of its own."""
    dtype = np.dtype(dtype)
    lengths = np.ascontiguousarray(sequence_lengths, dtype=np.int32)
    count = lengths.size
    pointers = np.zeros(count, dtype=np.int64)
    if count > 1:
        np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
    pointers *= dtype.itemsize
    if sequences_per_document is None:
        document_indices = np.arange(count + 1, dtype=np.int64)
    else:
        document_indices = np.zeros(len(sequences_per_document) + 1, dtype=np.int64)
        np.cumsum(sequences_per_document, dtype=np.int64, out=document_indices[1:])
        assert document_indices[-1] == count, (document_indices[-1], count)
    with open(path, "wb") as out:
        out.write(HEADER)
        out.write(struct.pack("<Q", _VERSION))
        out.write(struct.pack("<B", _DTYPE_CODES[dtype]))
        out.write(struct.pack("<Q", count))
        out.write(struct.pack("<Q", document_indices.size))
        out.write(lengths.tobytes(order="C"))
        out.write(pointers.tobytes(order="C"))
        out.write(document_indices.tobytes(order="C"))


def read_index_header(path: str) -> tuple[np.dtype, int, int]:
    """(token dtype, sequence count, document count) of an .idx file; ValueError if it is not one."""
    with open(path, "rb") as handle:
        head = handle.read(_FIXED)
    if len(head) < _FIXED or not head.startswith(HEADER):
        raise ValueError(f"{path}: not a Megatron .idx file")
    version, code, sequences, documents = struct.unpack("<QBQQ", head[len(HEADER) :])
    if version != _VERSION or code not in _CODE_DTYPES:
        raise ValueError(f"{path}: unsupported .idx version {version} or dtype code {code}")
    return _CODE_DTYPES[code], sequences, documents - 1


def read_sequence_lengths(path: str) -> np.ndarray:
    _, sequences, _ = read_index_header(path)
    return np.fromfile(path, dtype=np.int32, count=sequences, offset=_FIXED)


def read_document_indices(path: str) -> np.ndarray:
    """document_indices of an .idx: 0, then the sequence index where each document ends."""
    _, sequences, documents = read_index_header(path)
    return np.fromfile(path, dtype=np.int64, count=documents + 1, offset=_FIXED + sequences * (4 + 8))


def merge_datasets(prefixes: list[str], dest_prefix: str) -> tuple[int, int]:
    """Join datasets of one dtype, in order, into `dest_prefix` (.bin renamed before .idx); (documents, tokens)."""
    dtypes = {read_index_header(prefix + ".idx")[0] for prefix in prefixes}
    if len(dtypes) != 1:
        raise ValueError(f"cannot merge datasets of different token types {sorted(map(str, dtypes))}: {prefixes}")
    lengths = [read_sequence_lengths(prefix + ".idx") for prefix in prefixes]
    per_document = [np.diff(read_document_indices(prefix + ".idx")) for prefix in prefixes]
    bin_temp, idx_temp = dest_prefix + ".bin.tmp", dest_prefix + ".idx.tmp"
    concatenate([prefix + ".bin" for prefix in prefixes], bin_temp)
    write_index(idx_temp, dtypes.pop(), np.concatenate(lengths), np.concatenate(per_document))
    os.replace(bin_temp, dest_prefix + ".bin")
    os.replace(idx_temp, dest_prefix + ".idx")
    return int(sum(part.size for part in per_document)), int(sum(int(part.sum(dtype=np.int64)) for part in lengths))


def complete_dataset(prefix: str) -> tuple[int, int] | None:
    """(documents, tokens) when `<prefix>.idx` and `<prefix>.bin` form a whole dataset, else None.

    The .idx is renamed into place after the .bin, so a valid .idx whose token total matches the .bin size
    means a finished shard; anything else (missing, truncated, a leftover of another run) is rebuilt.
    """
    idx, bin_path = prefix + ".idx", prefix + ".bin"
    if not (os.path.isfile(idx) and os.path.isfile(bin_path)):
        return None
    try:
        dtype, sequences, documents = read_index_header(idx)
        expected_idx = _FIXED + sequences * (4 + 8) + (documents + 1) * 8
        if os.path.getsize(idx) != expected_idx:
            return None
        tokens = int(read_sequence_lengths(idx).sum(dtype=np.int64))
    except (ValueError, OSError):
        return None
    if os.path.getsize(bin_path) != tokens * dtype.itemsize:
        return None
    return documents, tokens


def concatenate(parts: Iterable[str], dest: str) -> None:
    """Append the files `parts` into `dest`, in order, letting the kernel copy where it can."""
    with open(dest, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                size = os.fstat(src.fileno()).st_size
                if hasattr(os, "copy_file_range"):
                    copied = 0
                    # Some filesystems (and some kernels across mounts) refuse copy_file_range: copy the rest below.
                    with contextlib.suppress(OSError):
                        while copied < size:
                            step = os.copy_file_range(src.fileno(), out.fileno(), size - copied)
                            if step == 0:
                                break
                            copied += step
                    if copied == size:
                        continue
                    src.seek(copied)
                    out.seek(0, os.SEEK_END)
                shutil.copyfileobj(src, out, 16 << 20)
