"""Which compression a raw data file uses, told by its first bytes rather than by its name.

    kind = compression_of("/data/corpus.jsonl")   # "gzip", "bz2", "xz", "zstd", or None for plain text

A gzip file renamed to `.jsonl` otherwise reaches the tokenizer as binary: every line is reported as invalid JSON
and the dataset comes out empty, with nothing that points at the compression.
"""

import bz2
import gzip
import lzma

# Magic numbers from each format's specification (RFC 1952, bzip2's header, the .xz format, RFC 8878).
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
# The name suffix that announces each kind (then no log line is needed: the user knows).
SUFFIX = {"gzip": ".gz", "bz2": ".bz2", "xz": ".xz", "zstd": ".zst"}
# Kinds the standard library reads; zstd needs the zstandard package, used only for files named `.zst`.
STDLIB_OPENERS = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}


def compression_of(path: str) -> str | None:
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None
