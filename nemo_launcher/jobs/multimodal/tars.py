"""Reading and writing the WebDataset tars of the multimodal steps.

    for key, members in examples("/data/raw/a_00000.tar"):      # members: {".jpg": bytes, ".txt": bytes, ...}
        caption = members[".txt"].decode()
    count_examples(path, [".jpg", ".txt"])                       # examples holding every listed member
    with AtomicTar("/data/out/000003.tar") as tar:               # renamed into place only when closed cleanly;
        tar.write({"__key__": "000003000", "jpg": data})

A member's key is its name up to the first dot of the file name, its extension the rest, as WebDataset reads them;
consecutive members with one key are one example.
"""

import os
import tarfile
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def split_name(name: str) -> tuple[str, str]:
    folder, _, base = name.rpartition("/")
    stem, dot, rest = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (dot + rest)


def grouped_members(tar, read: Callable[[tarfile.TarInfo], T]) -> Iterator[tuple[str, list[tuple[str, T]]]]:
    """(key, [(extension, read(member)), ...]) of each example of an open tar, in its order: consecutive file members
    of one key, as webdataset groups them. `read` sees each member as the tar reaches it (a stream cannot go back)."""
    key, members = None, []
    for info in tar:
        if not info.isfile():
            continue
        member_key, extension = split_name(info.name)
        if member_key != key and members:
            yield key, members
            members = []
        key = member_key
        members.append((extension, read(info)))
    if members:
        yield key, members


def examples(path: str) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, {extension: bytes}) of each example, in the order of the tar."""
    with tarfile.open(path, "r|") as tar:
        for key, members in grouped_members(tar, lambda info: tar.extractfile(info).read()):
            yield key, dict(members)


def complete(members: dict[str, bytes], extensions: Sequence[str]) -> bool:
    return all(extension in members for extension in extensions)


def count_examples(path: str, extensions: Sequence[str]) -> int:
    """Examples holding every one of `extensions`, from the tar's headers alone."""
    keys: dict[str, set] = {}
    with tarfile.open(path, "r:") as tar:
        for info in tar.getmembers():
            if info.isfile():
                key, extension = split_name(info.name)
                keys.setdefault(key, set()).add(extension)
    return sum(1 for found in keys.values() if all(extension in found for extension in extensions))


def tar_files(folder: str) -> list[str]:
    """The complete tars of a folder (temporary names left by a killed task are not .tar), sorted by name."""
    if not os.path.isdir(folder):
        return []
    return sorted(name for name in os.listdir(folder) if name.endswith(".tar"))


class AtomicTar:
    """A webdataset TarWriter on a temporary name, renamed to `path` when the block ends without an error."""

    def __init__(self, path: str):
        self.path = path
        self.temporary = f"{path}.tmp-{os.getpid()}"
        self.count = 0

    def __enter__(self):
        import webdataset

        # A fixed member time makes a tar's bytes depend on its examples only: a redone task writes identical files.
        self.writer = webdataset.TarWriter(self.temporary, encoder=False, mtime=0)
        return self

    def write(self, sample: dict[str, bytes]) -> None:
        self.writer.write(sample)
        self.count += 1

    def __exit__(self, kind, value, traceback):
        self.writer.close()
        if kind is None:
            os.replace(self.temporary, self.path)
        else:
            os.remove(self.temporary)
        return False
