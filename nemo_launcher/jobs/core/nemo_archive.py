"""The `.nemo` file: one tar holding a model's config, its weights and its tokenizer files (every family).

    save_nemo("megatron_gpt.nemo", model_config, model.state_dict())        # tokenizer files from the config
    config, state_dict = load_nemo("megatron_gpt.nemo")                      # a TP=1 PP=1 archive
    config, state_dict = load_nemo(path, shard_layout=gpt_shard_layout)      # any layout, merged to TP=1 PP=1
    model, tokenizer = load_gpt_from_nemo("megatron_gpt.nemo")               # gpt/inference.py: ready to run

| member                                  | holds                                                          |
|-----------------------------------------|----------------------------------------------------------------|
| model_config.yaml                       | the training `model:` section; its tokenizer file keys read    |
|                                         | `nemo:tokenizer/<file>` and point at the members below         |
| model_weights.pt                        | TP=1 and PP=1: torch.save of the GPTModel state dict           |
| tp_rank_XX_pp_rank_YYY/model_weights.pt | TP x PP > 1: the shard of each model-parallel rank             |
| tokenizer/<file>                        | vocab.json + merges.txt, a SentencePiece .model or tokenizer.json |

`model_config.yaml`'s tensor_model_parallel_size / pipeline_model_parallel_size say which weight members
exist. State dicts use the parameter names of megatron-core's local layer spec (see standalone.py) and
leave out `_extra_state` entries, which hold nothing for that spec. The tar is uncompressed so that
torch.load reads a weight member in place (weights do not compress anyway), and a file is written
under a temporary name and renamed, so a later stage never sees half an archive.
"""

import atexit
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ...contract.model_facts import NEMO_CONFIG_MEMBER
from ..common.config import JobConfigError
from .shards import ShardLayout, merge_shards

CONFIG_MEMBER = NEMO_CONFIG_MEMBER  # the contract's name, which the launcher's torch-free reader opens too
WEIGHTS_FILE = "model_weights.pt"
TOKENIZER_DIR = "tokenizer"
NEMO_PREFIX = "nemo:"
TOKENIZER_FILE_KEYS = ("model", "vocab_file", "merge_file")  # keys of model.tokenizer that name files


def weights_member(tp_rank: int, pp_rank: int, tensor_parallel: int, pipeline_parallel: int) -> str:
    if tensor_parallel == 1 and pipeline_parallel == 1:
        return WEIGHTS_FILE
    return f"tp_rank_{tp_rank:02d}_pp_rank_{pp_rank:03d}/{WEIGHTS_FILE}"


def layout_of(model_config: Mapping[str, Any]) -> tuple[int, int]:
    """(TP, PP) of the weights stored in an archive with this config."""
    return int(model_config.get("tensor_model_parallel_size") or 1), int(
        model_config.get("pipeline_model_parallel_size") or 1
    )


def tokenizer_files_of(model_config: Mapping[str, Any]) -> dict[str, str]:
    """{tokenizer key: file path} for the files the config's tokenizer reads (null keys left out)."""
    tokenizer = model_config.get("tokenizer") or {}
    return {key: str(tokenizer[key]) for key in TOKENIZER_FILE_KEYS if tokenizer.get(key)}


# ---- writing ----------------------------------------------------------------------------------------


def save_nemo(
    path,
    model_config: Mapping[str, Any],
    state_dict: Mapping[str, Any],
    tokenizer_files: Mapping[str, str] | None = None,
) -> Path:
    """Writes a TP=1 PP=1 archive from one full state dict.

    tokenizer_files maps a key of model.tokenizer (model, vocab_file, merge_file) to the file to pack;
    by default the files the config's tokenizer section names. The stored config's parallel sizes are
    set to 1, since that is what the weights are.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".nemo_staging_", dir=path.parent))
    try:
        weights = staging / WEIGHTS_FILE
        torch.save(_without_extra_state(state_dict), weights)
        config = dict(model_config, tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
        return write_nemo(path, config, {(0, 0): weights}, tokenizer_files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_nemo(
    path,
    model_config: Mapping[str, Any],
    weight_files: Mapping[tuple[int, int], os.PathLike],
    tokenizer_files: Mapping[str, str] | None = None,
) -> Path:
    """Packs weight files already saved per (tp_rank, pp_rank) (one entry for TP=1 PP=1) into an archive.

    The config's tensor/pipeline parallel sizes must match the ranks given: every shard must be there.
    """
    path = Path(path)
    tensor_parallel, pipeline_parallel = layout_of(model_config)
    expected = {(t, p) for t in range(tensor_parallel) for p in range(pipeline_parallel)}
    if set(weight_files) != expected:
        raise ValueError(
            f"weights for ranks {sorted(weight_files)} given, the config's TP({tensor_parallel}) x "
            f"PP({pipeline_parallel}) layout needs {sorted(expected)}"
        )
    files = dict(tokenizer_files_of(model_config) if tokenizer_files is None else tokenizer_files)
    config = _with_packed_tokenizer(model_config, files)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with tarfile.open(temporary, "w") as archive:
            _add_bytes(archive, CONFIG_MEMBER, yaml.safe_dump(config, sort_keys=False).encode())
            for (tp_rank, pp_rank), source in sorted(weight_files.items()):
                archive.add(str(source), arcname=weights_member(tp_rank, pp_rank, tensor_parallel, pipeline_parallel))
            for key, source in files.items():
                archive.add(str(source), arcname=_tokenizer_member(config, key))
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def _with_packed_tokenizer(model_config: Mapping[str, Any], files: Mapping[str, str]) -> dict[str, Any]:
    config = dict(model_config)
    tokenizer = dict(config.get("tokenizer") or {})
    used = set()
    for key, source in files.items():
        if key not in TOKENIZER_FILE_KEYS:
            raise ValueError(f"tokenizer file key {key!r} is not one of {', '.join(TOKENIZER_FILE_KEYS)}")
        if not Path(source).is_file():
            raise JobConfigError(
                f"model.tokenizer.{key}: {source} does not exist, so it cannot be packed into the .nemo"
            )
        name = Path(source).name
        if name in used:  # e.g. two files called tokenizer.model from different folders
            name = f"{key}_{name}"
        used.add(name)
        tokenizer[key] = f"{NEMO_PREFIX}{TOKENIZER_DIR}/{name}"
    config["tokenizer"] = tokenizer
    return config


def _tokenizer_member(config: Mapping[str, Any], key: str) -> str:
    return config["tokenizer"][key][len(NEMO_PREFIX) :]


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))


def _without_extra_state(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    # megatron's local-spec layers report `_extra_state: None` (a Transformer Engine hook); nothing to keep.
    return {key: value for key, value in state_dict.items() if not key.endswith("._extra_state")}


# ---- reading ----------------------------------------------------------------------------------------


def read_nemo_config(path, extract_dir: os.PathLike | None = None) -> dict[str, Any]:
    """The archive's model config, with its tokenizer file keys pointing at extracted copies of the files.

    extract_dir: where to put the tokenizer files; by default a temporary folder removed at exit.
    """
    with _open(path) as archive:
        return _read_config(archive, Path(path), extract_dir)


def load_nemo(
    path,
    extract_dir: os.PathLike | None = None,
    shard_layout: Callable[[Mapping[str, Any], int, int], ShardLayout] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model config, full state dict on the CPU). The shards of a TP/PP > 1 archive are merged into the
    TP=1 PP=1 state dict by the family's `shard_layout(model_config, tp, pp)` (gpt_shard_layout, ...); the
    returned config still names the archive's layout."""
    with _open(path) as archive:
        config = _read_config(archive, Path(path), extract_dir)
        tensor_parallel, pipeline_parallel = layout_of(config)
        if (tensor_parallel, pipeline_parallel) == (1, 1):
            return config, _read_weights(archive, Path(path), WEIGHTS_FILE)
        shards = {
            (t, p): _read_weights(archive, Path(path), weights_member(t, p, tensor_parallel, pipeline_parallel))
            for t in range(tensor_parallel)
            for p in range(pipeline_parallel)
        }
    if shard_layout is None:
        raise JobConfigError(
            f"{path}: holds TP({tensor_parallel}) x PP({pipeline_parallel}) shards; this "
            f"model's family has no rule to merge them"
        )
    return config, merge_shards(shards, shard_layout(config, tensor_parallel, pipeline_parallel))


def load_nemo_shard(path, tp_rank: int, pp_rank: int) -> dict[str, Any]:
    """The state dict of one model-parallel rank of an archive (the whole model for TP=1 PP=1)."""
    with _open(path) as archive:
        config = yaml.safe_load(_member_bytes(archive, Path(path), CONFIG_MEMBER))
        tensor_parallel, pipeline_parallel = layout_of(config)
        if not (0 <= tp_rank < tensor_parallel and 0 <= pp_rank < pipeline_parallel):
            raise JobConfigError(
                f"{path}: has TP({tensor_parallel}) x PP({pipeline_parallel}) shards; "
                f"there is no tp_rank {tp_rank}, pp_rank {pp_rank}"
            )
        return _read_weights(archive, Path(path), weights_member(tp_rank, pp_rank, tensor_parallel, pipeline_parallel))


def padded_vocab_of(state_dict: Mapping[str, Any], tensor_parallel: int, fallback: int) -> int:
    """Rows of the (padded) embedding table over all TP ranks; `fallback` for a middle pipeline stage,
    which has neither the embedding nor the output layer and so never uses the value."""
    for key in ("embedding.word_embeddings.weight", "output_layer.weight"):
        if key in state_dict:
            return int(state_dict[key].shape[0]) * tensor_parallel
    return fallback


def load_weights(model, state_dict: Mapping[str, Any], source: str) -> None:
    """Loads every parameter; `_extra_state` entries are the only ones allowed to be missing."""
    result = model.load_state_dict(dict(state_dict), strict=False)
    missing = [key for key in result.missing_keys if not key.endswith("._extra_state")]
    if missing or result.unexpected_keys:
        raise JobConfigError(
            f"{source}: the weights do not fit the model the config describes "
            f"(missing: {missing[:5]}, unexpected: {result.unexpected_keys[:5]})"
        )


def _open(path) -> tarfile.TarFile:
    path = Path(path)
    if not path.is_file():
        raise JobConfigError(f"{path}: no such .nemo file")
    try:
        return tarfile.open(path, "r:*")
    except tarfile.TarError as error:
        # tarfile lists each compression it tried on a line of its own; an error is one line.
        raise JobConfigError(f"{path}: not a .nemo archive ({' '.join(str(error).split())})") from None


def _member(archive: tarfile.TarFile, path: Path, name: str):
    """The open member `name` (a file object), or JobConfigError naming the archive when it has none."""
    try:
        handle = archive.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise JobConfigError(f"{path}: the archive has no {name}")
    return handle


def _member_bytes(archive: tarfile.TarFile, path: Path, name: str) -> bytes:
    return _member(archive, path, name).read()


def _read_config(archive: tarfile.TarFile, path: Path, extract_dir: os.PathLike | None) -> dict[str, Any]:
    config = yaml.safe_load(_member_bytes(archive, path, CONFIG_MEMBER))
    if not isinstance(config, dict):
        raise JobConfigError(f"{path}: {CONFIG_MEMBER} is not a mapping")
    tokenizer = dict(config.get("tokenizer") or {})
    packed = {
        key: value for key, value in tokenizer.items() if isinstance(value, str) and value.startswith(NEMO_PREFIX)
    }
    if packed:
        target = Path(extract_dir) if extract_dir is not None else _temporary_dir()
        target.mkdir(parents=True, exist_ok=True)
        for key, value in packed.items():
            member = value[len(NEMO_PREFIX) :]
            # Only the base name is used on disk, so a crafted member name cannot write outside `target`.
            destination = target / Path(member).name
            destination.write_bytes(_member_bytes(archive, path, member))
            tokenizer[key] = str(destination)
        config["tokenizer"] = tokenizer
    return config


def _read_weights(archive: tarfile.TarFile, path: Path, name: str) -> dict[str, Any]:
    import torch

    # An uncompressed member is a seekable view into the tar, which torch.load needs.
    return torch.load(_member(archive, path, name), map_location="cpu", weights_only=True)


def _temporary_dir() -> Path:
    target = Path(tempfile.mkdtemp(prefix="nemo_tokenizer_"))
    atexit.register(shutil.rmtree, target, True)
    return target
