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

from typing import Any

import torch

from ...contract.schemas.bert_training import BertModelSection
from ..core.nemo_archive import load_nemo
from ..core.standalone import build_eval_chunk, inference_copy, load_from_nemo, start_model_parallel
from .model import bert_chunk, transformer_config
from .shards import bert_shard_layout


def start_bert_model_parallel(tensor_parallel: int, pipeline_parallel: int, seed: int = 1234):
    """Joins the process group and initialises megatron's parallel state (core/standalone.py), with BertModel's
    modules loaded first so the CPU shim patches them too."""
    import megatron.core.models.bert.bert_model  # noqa: F401

    return start_model_parallel(tensor_parallel, pipeline_parallel, seed)


def inference_section(model: BertModelSection, tensor_parallel: int, pipeline_parallel: int) -> BertModelSection:
    """The training `model:` section with what only changes training speed switched off (the weights compute
    the same function): core's INFERENCE_SETTINGS, sequence parallelism and virtual pipeline stages."""
    return inference_copy(
        model, tensor_parallel, pipeline_parallel, virtual_pipeline_model_parallel_size=None, sequence_parallel=False
    )


def build_inference_model(model: BertModelSection, vocab_size: int, precision: str, initialize: bool = False):
    """This rank's BertModel chunk in eval mode; `vocab_size` is the padded size the weights were trained with.
    initialize=False skips the random init: the caller loads every parameter."""
    return build_eval_chunk(bert_chunk, transformer_config, model, vocab_size, precision, initialize)


def load_bert_nemo(path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model config, full state dict on the CPU): the shards of a TP/PP > 1 archive merged into TP=1 PP=1's.
    The returned config still names the archive's layout."""
    return load_nemo(path, shard_layout=bert_shard_layout)


def load_bert_from_nemo(path, tensor_parallel: int = 1, pipeline_parallel: int = 1, precision: str | None = None):
    """(BertModel chunk of this rank in eval mode, tokenizer) from an archive, at the TP x PP asked for
    (core/standalone.py's load_from_nemo with BERT's parts).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from .converter import BERT  # the converter names BERT's parts and imports this module

    return load_from_nemo(BERT, path, tensor_parallel, pipeline_parallel, precision)
