"""WebDataset tars of image-caption examples (<key>.jpg or another image extension, <key>.txt) as a map-style
dataset indexed by the run's sample number, read with the `webdataset` library.

    shards = list_shards(["/data/laion/wdinfo.pkl", "/data/more/tarfiles_reorganized"], "model.data.train.dataset_path")
    dataset = ShardExamples(shards, length=12_000_000_000, seed=1234, shuffle=True, encode=to_tensors)
    dataset[n] -> encode(members, n)          # members: {"jpg": bytes, "txt": bytes, "__key__": ...}

Pass e = n // (examples in all shards) reads the shards in an order drawn from (seed, e), and the examples of each
shard in an order drawn from (seed, e, shard): every example once per pass, a new order every pass, and any
process can compute which example sample n is. A process keeps the member offsets of the shard it used last (read
from the tar's headers) and reads only the members of the examples it is asked for, so loader workers that take
turns over the steps never read a whole shard each.
"""

import bisect
import dataclasses
import os
import tarfile
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ...contract.wdinfo import listed_tars
from ..common.config import JobConfigError
from ..multimodal.tars import grouped_members, split_name, tar_files

IMAGE_MEMBERS = ("jpg", "jpeg", "png", "webp")


@dataclasses.dataclass(frozen=True)
class Shard:
    path: str
    examples: int  # image-caption examples it holds


def _complete(extensions) -> bool:
    return "txt" in extensions and any(e in extensions for e in IMAGE_MEMBERS)


def precached(extensions) -> bool:
    """A precache_encodings example: its encodings are one .pickle (the image and caption may be beside it)."""
    return "pickle" in extensions


def count_pairs(path: str, complete=_complete) -> int:
    """Examples with a caption and an image (or what `complete` asks of an example's extensions), from the tar's
    headers."""
    found: dict[str, set] = {}
    with tarfile.open(path, "r:") as tar:
        for info in tar.getmembers():
            if info.isfile():
                key, extension = split_name(info.name)
                found.setdefault(key, set()).add(extension.lstrip(".").lower())
    return sum(1 for extensions in found.values() if complete(extensions))


def list_shards(entries: Sequence[str], key: str, complete=_complete) -> list[Shard]:
    """The shards of wdinfo.pkl files (generate_wdinfo: full and partial tars, paths relative to the file), .tar
    files and folders of complete .tar files."""
    shards: list[Shard] = []
    for entry in entries:
        if entry.endswith(".pkl"):
            try:
                shards += [Shard(tar, examples) for tar, examples in listed_tars(entry)]
            except ValueError as error:
                raise JobConfigError(f"{key}: {error}") from None
        elif entry.endswith(".tar") and os.path.isfile(entry):
            shards.append(Shard(entry, count_pairs(entry, complete)))
        elif os.path.isdir(entry):
            shards += [
                Shard(os.path.join(entry, name), count_pairs(os.path.join(entry, name), complete))
                for name in tar_files(entry)
            ]
        else:
            raise JobConfigError(f"{key}: {entry} is neither a wdinfo.pkl, a .tar nor a folder of .tar files")
    shards = [s for s in shards if s.examples]
    if not shards:
        raise JobConfigError(f"{key}: {list(entries)} hold no image-caption examples (<key>.jpg and <key>.txt)")
    return shards


Members = dict[str, tuple[int, int]]  # extension -> (offset of the data in the tar, size in bytes)


def index_examples(path: str, complete=_complete) -> list[tuple[str, Members]]:
    """(key, members) of the complete examples of one tar, in its order (the samples webdataset's tar reader
    groups), from its headers alone: iterating a tar opened for random access seeks past each member's data."""
    found: list[tuple[str, Members]] = []
    with tarfile.open(path, "r:") as tar:
        for key, places in grouped_members(tar, lambda info: (info.offset_data, info.size)):
            members = {extension.lstrip(".").lower(): place for extension, place in places}
            if complete(set(members)):
                found.append((key, members))
    return found


def read_members(handle, key: str, members: Members) -> dict[str, bytes]:
    """One example's members from an open tar, keyed as webdataset keys a sample's ({"__key__", "jpg", "txt"})."""
    example = {"__key__": key}
    for extension, (offset, size) in members.items():
        handle.seek(offset)
        example[extension] = handle.read(size)
    return example


def _permutation(size: int, *seed: int) -> np.ndarray:
    return np.random.default_rng(list(seed)).permutation(size)


class ShardExamples(torch.utils.data.Dataset):
    def __init__(
        self,
        shards: list[Shard],
        length: int,
        seed: int,
        shuffle: bool,
        encode: Callable[[dict[str, bytes], int], dict[str, torch.Tensor]],
        complete=_complete,
    ):
        self.shards, self.length, self.seed, self.shuffle, self.encode = shards, length, seed, shuffle, encode
        self.complete = complete
        self.total = sum(s.examples for s in shards)
        self._pass, self._order, self._ends = None, None, None
        self._cached_path, self._cached, self._handle = None, None, None
        self._shuffled = None  # ((pass, shard index), its example order)

    def __len__(self) -> int:
        return self.length

    def _plan(self, epoch: int) -> None:
        if epoch != self._pass:
            order = _permutation(len(self.shards), self.seed, epoch) if self.shuffle else np.arange(len(self.shards))
            self._order = order.tolist()
            self._ends = np.cumsum([self.shards[i].examples for i in self._order]).tolist()
            self._pass = epoch

    def _example(self, shard: Shard, offset: int) -> dict[str, bytes]:
        """Reads the one example's members: the DataLoader hands a step to one worker and the next to another, so
        both touch most shards, and reading whole shards made each worker read every shard (the loader then fed
        the CLIP trainer at 0.74 of a plain webdataset pipeline's rate, benchmarks/clip_loader_throughput.py)."""
        if self._cached_path != shard.path:
            examples = index_examples(shard.path, self.complete)
            if len(examples) != shard.examples:
                raise JobConfigError(
                    f"model.data: {shard.path} holds {len(examples)} image-caption examples where its "
                    f"listing says {shard.examples}; regenerate wdinfo.pkl (generate_wdinfo)"
                )
            if self._handle is not None:
                self._handle.close()
            self._cached_path, self._cached, self._handle = shard.path, examples, open(shard.path, "rb")
        return read_members(self._handle, *self._cached[offset])

    def __getstate__(self):
        # A DataLoader worker gets its own copy; an open file does not travel (and each worker opens its own).
        return {**self.__dict__, "_cached_path": None, "_cached": None, "_handle": None}

    def __getitem__(self, sample: int):
        epoch, position = divmod(sample, self.total)
        self._plan(epoch)
        slot = bisect.bisect_right(self._ends, position)
        index = self._order[slot]
        offset = position - (self._ends[slot - 1] if slot else 0)
        if self.shuffle:
            if self._shuffled is None or self._shuffled[0] != (epoch, index):  # drawn once per shard and pass
                self._shuffled = ((epoch, index), _permutation(self.shards[index].examples, self.seed, epoch, index))
            offset = int(self._shuffled[1][offset])
        return self.encode(self._example(self.shards[index], offset), sample)
