"""A GPT model ready for a forward pass without a trainer (conversion, evaluation, serving, tuning).

    placement = start_model_parallel(tensor_parallel=1, pipeline_parallel=1)     # core/standalone.py
    model = build_inference_model(model_section, vocab_size, precision="fp32")
    model, tokenizer = load_gpt_from_nemo("megatron_gpt.nemo")                    # ready for a forward pass
    config, state_dict = load_gpt_nemo("megatron_gpt.nemo")                       # any TP/PP, merged

The layer spec is megatron-core's local one (see core/standalone.py for why).
"""

import dataclasses

import torch

from ...contract.schemas.gpt_training import ModelSection
from ..common.config import JobConfigError, bind
from ..common.tokenizer import load_tokenizer
from ..core.nemo_archive import layout_of, load_nemo, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
from ..core.shards import split_state_dict
from ..core.standalone import PRECISIONS, on_gpu, precision_of, start_model_parallel
from .shards import gpt_shard_layout


def load_gpt_nemo(path, extract_dir=None):
    """(model config, full state dict) of a GPT archive written at any TP x PP."""
    return load_nemo(path, extract_dir, shard_layout=gpt_shard_layout)


def inference_section(model: ModelSection, tensor_parallel: int, pipeline_parallel: int) -> ModelSection:
    """The training `model:` section with what only matters for training switched off.

    Dropout stays as configured (the caller puts the model in eval mode); sequence parallelism,
    activation recomputation, FP8 and Transformer Engine are training-speed features that the local
    spec on a CPU cannot run, and they do not change the function the weights compute.
    """
    return dataclasses.replace(
        model,
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        virtual_pipeline_model_parallel_size=None,
        sequence_parallel=False,
        activations_checkpoint_granularity=None,
        activations_checkpoint_method=None,
        activations_checkpoint_num_layers=None,
        overlap_p2p_comm=False,
        transformer_engine=False,
        fp8=False,
        use_cpu_initialization=True,
    )


def build_inference_model(
    model: ModelSection, vocab_size: int, precision: str, initialize: bool = False
) -> torch.nn.Module:
    """One GPTModel chunk for this rank (the parallel state must exist), in eval mode, on this rank's device.

    `vocab_size` is the padded size the weights were trained with (rows of the embedding table), not the
    tokenizer's. initialize=False skips the random init: the caller loads weights over every parameter.
    """
    from .model import build_gpt_chunks, transformer_config  # deferred: megatron-core loads with the model

    if precision not in PRECISIONS:
        raise JobConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    config = transformer_config(model, precision=precision, on_gpu=on_gpu(), use_te=False)
    if not initialize:
        config = dataclasses.replace(config, perform_initialization=False)
    (chunk,) = build_gpt_chunks(model, config, vocab_size=vocab_size, use_te=False)
    if on_gpu():
        chunk = chunk.cuda(torch.cuda.current_device())
    return chunk.eval()


def load_gpt_from_nemo(path, tensor_parallel: int = 1, pipeline_parallel: int = 1, precision: str | None = None):
    """(GPTModel chunk of this rank in eval mode, tokenizer) from an archive.

    Starts the process group and megatron's parallel state when they are not running (one process for
    TP=1 PP=1). An archive written for this TP x PP gives each rank its own shard; any other layout is
    merged and re-split on the fly (every rank then reads the whole archive once).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from megatron.core import parallel_state  # deferred: megatron-core loads only when a model is built

    config = read_nemo_config(path)
    start_model_parallel(tensor_parallel, pipeline_parallel, seed=int(config.get("seed", 1234)))
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    if layout_of(config) == (tensor_parallel, pipeline_parallel):
        state_dict = load_nemo_shard(path, tp_rank, pp_rank)
    else:
        _, full = load_gpt_nemo(path)
        state_dict = split_state_dict(
            full, gpt_shard_layout(config, tensor_parallel, pipeline_parallel), tp_rank, pp_rank
        )
    section = inference_section(bind(ModelSection, config, "model"), tensor_parallel, pipeline_parallel)
    spec = section.tokenizer
    tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
    model = build_inference_model(
        section,
        padded_vocab_of(state_dict, tensor_parallel, tokenizer.vocab_size),
        precision or precision_of(state_dict),
    )
    load_weights(model, state_dict, str(path))
    return model, tokenizer
