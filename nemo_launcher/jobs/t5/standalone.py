"""A T5 or mT5 model outside training (conversion, fine-tuning, evaluation, export, tests): megatron set up, the
model built for inference, and `.nemo` archives written and read back.

    placement = start_t5_model_parallel(tensor_parallel=1)
    model = build_inference_model(model_section, vocab_size=32128, precision="fp32")
    save_t5_nemo("megatron_t5.nemo", model_config, model)                # TP=1; tokenizer files from the config
    config, full_state = load_t5_nemo("megatron_t5.nemo")                # shards merged to TP=1
    model, tokenizer = load_t5_from_nemo("megatron_t5.nemo", tensor_parallel=2)   # any TP the archive has

The archive is GPT's (core/nemo_archive.py: model_config.yaml, per-rank model_weights.pt, tokenizer/vocab.txt or
the SentencePiece .model) with T5Model's parameter names; shards merge and split by T5's rules (shards.py). A T5
has PP 1 (megatron-core 0.16 cannot split it over pipeline stages), so the only layout that varies is TP. The layer
spec is always megatron-core's local one: its names are the canonical ones in our
archives, and its sharded-state keys equal the Transformer Engine spec's, so it reads checkpoints trained with
either.
"""

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...contract.schemas.t5_training import T5ModelSection
from ..common.config import JobConfigError
from ..common.tokenizer import load_tokenizer
from ..core.nemo_archive import layout_of, load_nemo_shard, read_nemo_config, save_nemo
from ..core.shards import merge_shards
from ..core.standalone import build_eval_chunk, inference_copy, load_from_nemo, start_model_parallel
from .model import t5_chunk, transformer_config
from .shards import t5_shard_layout


def start_t5_model_parallel(tensor_parallel: int, pipeline_parallel: int = 1, seed: int = 1234):
    """Joins the process group and initialises megatron's parallel state (core/standalone.py), with T5Model's
    modules imported first so that the CPU shim patches them too."""
    import megatron.core.models.T5.t5_model  # noqa: F401

    if pipeline_parallel != 1:
        raise JobConfigError(
            f"pipeline_model_parallel_size: {pipeline_parallel}: a T5 runs with PP 1 in megatron-core 0.16"
        )
    return start_model_parallel(tensor_parallel, pipeline_parallel, seed)


def inference_section(model: T5ModelSection, tensor_parallel: int, pipeline_parallel: int = 1) -> T5ModelSection:
    """The training `model:` section with what only changes training speed switched off (the weights compute the
    same function): core's INFERENCE_SETTINGS."""
    return inference_copy(model, tensor_parallel, pipeline_parallel, pipeline_model_parallel_split_rank=0)


def build_inference_model(model: T5ModelSection, vocab_size: int, precision: str, initialize: bool = False):
    """This rank's T5Model in eval mode, on this rank's device; `vocab_size` is the padded size the weights were
    trained with (rows of the embedding table). initialize=False skips the random init: the caller loads every
    parameter."""
    return build_eval_chunk(t5_chunk, transformer_config, model, vocab_size, precision, initialize)


def host_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights on the host, without the `_extra_state` entries (the local spec keeps nothing there):
    a .nemo is read on machines without this GPU."""
    return {key: value.detach().cpu() for key, value in model.state_dict().items() if not key.endswith("._extra_state")}


def save_t5_nemo(
    path, model_config: Mapping[str, Any], model: torch.nn.Module, tokenizer_files: Mapping[str, str] | None = None
) -> Path:
    """Writes a TP=1 model (the whole T5Model of a one-process run) as a .nemo with the tokenizer files the
    config names (vocab.txt for T5, the SentencePiece .model for mT5) packed in."""
    return save_nemo(path, model_config, host_state_dict(model), tokenizer_files)


def load_t5_nemo(path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model config, full state dict on the CPU): the shards of a TP > 1 archive merged into TP=1's. The returned
    config still names the archive's layout; its tokenizer keys point at extracted copies of the packed files."""
    config = read_nemo_config(path)
    tensor_parallel, _ = layout_of(config)
    shards = {(t, 0): load_nemo_shard(path, t, 0) for t in range(tensor_parallel)}
    if tensor_parallel == 1:
        return config, shards[(0, 0)]
    return config, merge_shards(shards, t5_shard_layout(config, tensor_parallel))


def load_t5_from_nemo(path, tensor_parallel: int = 1, pipeline_parallel: int = 1, precision: str | None = None):
    """(T5Model of this rank in eval mode, tokenizer with T5's sentinels) from an archive, at the TP asked for
    (core/standalone.py's load_from_nemo with T5's parts).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from .converter import T5  # the converter names T5's parts and imports this module

    return load_from_nemo(
        T5, path, tensor_parallel, pipeline_parallel, precision, lambda spec: load_tokenizer(**dataclasses.asdict(spec))
    )
