"""A GPT model ready for a forward pass without a trainer (conversion, evaluation, serving, tuning).

    placement = start_model_parallel(tensor_parallel=1, pipeline_parallel=1)     # core/standalone.py
    model = build_inference_model(model_section, vocab_size, precision="fp32")
    model, tokenizer = load_gpt_from_nemo("megatron_gpt.nemo")                    # ready for a forward pass
    config, state_dict = load_gpt_nemo("megatron_gpt.nemo")                       # any TP/PP, merged

The layer spec is megatron-core's local one (see core/standalone.py for why).
"""

import torch

from ...contract.schemas.gpt_training import ModelSection
from ..core.nemo_archive import load_nemo
from ..core.standalone import build_eval_chunk, inference_copy, load_from_nemo
from .shards import gpt_shard_layout


def load_gpt_nemo(path, extract_dir=None):
    """(model config, full state dict) of a GPT archive written at any TP x PP."""
    return load_nemo(path, extract_dir, shard_layout=gpt_shard_layout)


def inference_section(model: ModelSection, tensor_parallel: int, pipeline_parallel: int) -> ModelSection:
    """The training `model:` section with what only matters for training switched off.

    Dropout stays as configured (the caller puts the model in eval mode); core's INFERENCE_SETTINGS, sequence
    parallelism, virtual pipeline stages, overlapped p2p and FP8 are training-speed features that the local spec on
    a CPU cannot run, and they do not change the function the weights compute.
    """
    return inference_copy(
        model,
        tensor_parallel,
        pipeline_parallel,
        virtual_pipeline_model_parallel_size=None,
        sequence_parallel=False,
        overlap_p2p_comm=False,
        fp8=False,
    )


def build_inference_model(
    model: ModelSection, vocab_size: int, precision: str, initialize: bool = False
) -> torch.nn.Module:
    """One GPTModel chunk for this rank (the parallel state must exist), in eval mode, on this rank's device.

    `vocab_size` is the padded size the weights were trained with (rows of the embedding table), not the
    tokenizer's. initialize=False skips the random init: the caller loads weights over every parameter.
    """
    from .model import gpt_chunk, transformer_config  # deferred: megatron-core loads with the model

    return build_eval_chunk(gpt_chunk, transformer_config, model, vocab_size, precision, initialize)


def load_gpt_from_nemo(path, tensor_parallel: int = 1, pipeline_parallel: int = 1, precision: str | None = None):
    """(GPTModel chunk of this rank in eval mode, tokenizer) from an archive, at the TP x PP asked for
    (core/standalone.py's load_from_nemo with GPT's parts).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from .converter import GPT  # the converter names GPT's parts and imports this module

    return load_from_nemo(GPT, path, tensor_parallel, pipeline_parallel, precision)
