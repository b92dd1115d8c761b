"""A BERT model outside training (conversion, tests, downstream jobs): megatron set up, the model built for
inference, and `.nemo` archives read back.

    placement = start_bert_model_parallel(tensor_parallel=1, pipeline_parallel=1)
    model = build_inference_model(model_section, vocab_size=4096, precision="fp32")
    model, tokenizer = load_bert_from_nemo("megatron_bert.nemo")           # any TP/PP the archive was written with
    config, full_state = load_bert_nemo("megatron_bert.nemo")              # shards merged to TP=1 PP=1

The archive format is GPT's (core/nemo_archive.py: model_config.yaml, per-rank model_weights.pt, tokenizer/vocab.txt)
with BERT's parameter names; merging and splitting shards follow BERT's rules (shards.py). The layer spec is always
megatron-core's local one: its names are the canonical ones in our archives, and its sharded-state keys equal the
Transformer Engine spec's, so it reads checkpoints trained with either.
"""

import dataclasses
from typing import Any

import torch

from ...contract.schemas.bert_training import BertModelSection
from ..common.config import JobConfigError, bind
from ..core.nemo_archive import layout_of, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
from ..core.shards import merge_shards, split_state_dict
from ..core.standalone import PRECISIONS, on_gpu, precision_of, start_model_parallel
from ..core.transformer import build_chunks
from .model import bert_chunk, transformer_config
from .shards import bert_shard_layout


def start_bert_model_parallel(tensor_parallel: int, pipeline_parallel: int, seed: int = 1234):
    """Joins the process group and initialises megatron's parallel state (core/standalone.py), with BertModel's
    modules loaded first so the CPU shim patches them too."""
    import megatron.core.models.bert.bert_model  # noqa: F401

    return start_model_parallel(tensor_parallel, pipeline_parallel, seed)


def inference_section(model: BertModelSection, tensor_parallel: int, pipeline_parallel: int) -> BertModelSection:
    """The training `model:` section with what only changes training speed switched off (the weights compute
    the same function): sequence parallelism, recomputation, Transformer Engine, virtual pipeline stages."""
    return dataclasses.replace(
        model,
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        virtual_pipeline_model_parallel_size=None,
        sequence_parallel=False,
        activations_checkpoint_granularity=None,
        activations_checkpoint_method=None,
        activations_checkpoint_num_layers=None,
        transformer_engine=False,
        use_cpu_initialization=True,
    )


def build_inference_model(model: BertModelSection, vocab_size: int, precision: str, initialize: bool = False):
    """This rank's BertModel chunk in eval mode; `vocab_size` is the padded size the weights were trained with.
    initialize=False skips the random init: the caller loads every parameter."""
    if precision not in PRECISIONS:
        raise JobConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    config = transformer_config(model, precision=precision, on_gpu=on_gpu(), use_te=False)
    if not initialize:
        config = dataclasses.replace(config, perform_initialization=False)
    (chunk,) = build_chunks(bert_chunk, model, config, vocab_size, use_te=False)
    if on_gpu():
        chunk = chunk.cuda(torch.cuda.current_device())
    return chunk.eval()


def load_bert_nemo(path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model config, full state dict on the CPU): the shards of a TP/PP > 1 archive merged into TP=1 PP=1's.
    The returned config still names the archive's layout."""
    config = read_nemo_config(path)
    tensor_parallel, pipeline_parallel = layout_of(config)
    shards = {(t, p): load_nemo_shard(path, t, p) for t in range(tensor_parallel) for p in range(pipeline_parallel)}
    if len(shards) == 1:
        return config, shards[(0, 0)]
    return config, merge_shards(shards, bert_shard_layout(config, tensor_parallel, pipeline_parallel))


def load_bert_from_nemo(path, tensor_parallel: int = 1, pipeline_parallel: int = 1, precision: str | None = None):
    """(BertModel chunk of this rank in eval mode, tokenizer) from an archive, at the TP x PP asked for.

    Starts the process group and megatron's parallel state when they are not running (one process for TP=1 PP=1).
    An archive written for this layout gives each rank its own shard; any other is merged and re-split.
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from megatron.core import parallel_state

    from ..common.tokenizer import load_tokenizer

    config = read_nemo_config(path)
    start_bert_model_parallel(tensor_parallel, pipeline_parallel, seed=int(config.get("seed", 1234)))
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    if layout_of(config) == (tensor_parallel, pipeline_parallel):
        state_dict = load_nemo_shard(path, tp_rank, pp_rank)
    else:
        _, full = load_bert_nemo(path)
        state_dict = split_state_dict(
            full, bert_shard_layout(config, tensor_parallel, pipeline_parallel), tp_rank, pp_rank
        )
    section = inference_section(bind(BertModelSection, config, "model"), tensor_parallel, pipeline_parallel)
    spec = section.tokenizer
    tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
    model = build_inference_model(
        section,
        padded_vocab_of(state_dict, tensor_parallel, tokenizer.vocab_size),
        precision or precision_of(state_dict),
    )
    load_weights(model, state_dict, str(path))
    return model, tokenizer
