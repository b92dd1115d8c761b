"""megatron-core set up for jobs that use a model without training it (conversion, evaluation, serving), any family.

    placement = start_model_parallel(tensor_parallel=1, pipeline_parallel=1)
    model = build_inference_model(model_section, vocab_size, precision="fp32")   # the family's (gpt/inference.py)
    model, tokenizer = load_from_nemo(GPT, "megatron_gpt.nemo", 1, 1, None)      # GPT: the family's converter.py

A family's inference_section, build_inference_model and load_*_from_nemo are inference_copy, build_eval_chunk and
load_from_nemo with its own parts.

The trainer does the same work inside its Lightning strategy; these jobs have no Trainer, so they join
the process group (one process when no launcher variables are set), apply the CPU shim when there is
no GPU, and initialise megatron's parallel state themselves. The layer spec is always megatron-core's
local one: its parameter names are the canonical ones inside our `.nemo` files, and its
sharded-state keys equal the Transformer Engine spec's, so it loads checkpoints trained with either.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ..common.config import JobConfigError, bind
from ..common.distributed import Placement, init_process_group, placement_from_env
from ..common.tokenizer import Tokenizer, load_tokenizer
from .nemo_archive import layout_of, load_nemo, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
from .shards import split_state_dict
from .transformer import build_chunks

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Settings of a training `model:` section that change only the training speed, never the function the weights
# compute, and that a model built for inference turns off whatever its family: activation recomputation, and
# Transformer Engine and initialisation on the GPU, which the local spec on a CPU cannot run.
INFERENCE_SETTINGS = dict(
    activations_checkpoint_granularity=None,
    activations_checkpoint_method=None,
    activations_checkpoint_num_layers=None,
    transformer_engine=False,
    use_cpu_initialization=True,
)


def inference_copy(model, tensor_parallel: int, pipeline_parallel: int, **settings):
    """The training `model:` section (a dataclass) to build for inference at TP x PP: INFERENCE_SETTINGS and the
    family's own further `settings` (training-speed switches its section has besides) replaced."""
    return dataclasses.replace(
        model,
        tensor_model_parallel_size=tensor_parallel,
        pipeline_model_parallel_size=pipeline_parallel,
        **INFERENCE_SETTINGS,
        **settings,
    )


def on_gpu() -> bool:
    return torch.cuda.is_available()


def start_model_parallel(tensor_parallel: int, pipeline_parallel: int, seed: int = 1234) -> Placement:
    """Joins the process group and initialises megatron's parallel state for TP x PP (x DP = the rest).

    Idempotent within a process as long as the sizes agree; a second call with other sizes is an error,
    because megatron keeps one global parallel state per process.
    """
    import megatron.core.dist_checkpointing  # noqa: F401  (imported before the shim so it is patched)
    import megatron.core.models.gpt  # noqa: F401
    import megatron.core.pipeline_parallel  # noqa: F401
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    placement = placement_from_env()
    gpu = on_gpu()
    if gpu:
        torch.cuda.set_device(placement.local_rank)
    else:
        from ..common.mcore_cpu import apply_cpu_shim

        apply_cpu_shim()
    init_process_group(placement, "nccl" if gpu else "gloo")
    if parallel_state.model_parallel_is_initialized():
        have = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
        )
        if have != (tensor_parallel, pipeline_parallel):
            raise JobConfigError(
                f"this process already runs TP({have[0]}) x PP({have[1]}); "
                f"cannot also run TP({tensor_parallel}) x PP({pipeline_parallel})"
            )
        return placement
    world = placement.world_size
    if world % (tensor_parallel * pipeline_parallel):
        raise JobConfigError(
            f"TP({tensor_parallel}) x PP({pipeline_parallel}) = {tensor_parallel * pipeline_parallel} "
            f"does not divide the {world} processes started"
        )
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor_parallel, pipeline_model_parallel_size=pipeline_parallel
    )
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    return placement


def precision_of(state_dict) -> str:
    """'fp32', 'bf16' or 'fp16': the dtype of the stored floating-point weights."""
    for value in state_dict.values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return next(name for name, dtype in PRECISIONS.items() if dtype == value.dtype)
    raise JobConfigError("the state dict holds no floating-point tensor")


def build_eval_chunk(
    chunk: Callable, transformer_config: Callable, model, vocab_size: int, precision: str, initialize: bool = False
) -> torch.nn.Module:
    """This rank's one model chunk (the parallel state must exist) with the local spec, in eval mode, on this rank's
    device. chunk: the family's chunk builder (gpt_chunk, bert_chunk, ...); transformer_config: its
    (model, precision=, on_gpu=, use_te=) -> TransformerConfig. `vocab_size` is the padded size the weights were
    trained with (rows of the embedding table), not the tokenizer's. initialize=False skips the random init: the
    caller loads weights over every parameter."""
    if precision not in PRECISIONS:
        raise JobConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    config = transformer_config(model, precision=precision, on_gpu=on_gpu(), use_te=False)
    if not initialize:
        config = dataclasses.replace(config, perform_initialization=False)
    (built,) = build_chunks(chunk, model, config, vocab_size, use_te=False)
    if on_gpu():
        built = built.cuda(torch.cuda.current_device())
    return built.eval()


def _named_tokenizer(spec) -> Tokenizer:
    return load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)


def load_from_nemo(
    family,
    path,
    tensor_parallel: int,
    pipeline_parallel: int,
    precision: str | None,
    tokenizer_of: Callable[[Any], Tokenizer] = _named_tokenizer,
) -> tuple[torch.nn.Module, Tokenizer]:
    """(this rank's model chunk in eval mode, tokenizer) from an archive, at the TP x PP asked for.

    family: the family's ConversionFamily (its converter.py), for its model schema, parallel start, inference
    section, model builder and shard rules. tokenizer_of: the tokenizer of the model section's `tokenizer`; by
    default from its library, type, model, vocab_file and merge_file.
    Starts the process group and megatron's parallel state when they are not running (one process for TP=1 PP=1).
    An archive written for this TP x PP gives each rank its own shard; any other layout is merged and re-split on the
    fly (every rank then reads the whole archive once).
    precision: fp32, bf16 or fp16; by default the dtype the weights are stored in.
    """
    from megatron.core import parallel_state  # deferred: megatron-core loads only when a model is built

    config = read_nemo_config(path)
    family.start_parallel(tensor_parallel, pipeline_parallel, seed=int(config.get("seed", 1234)))
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    if layout_of(config) == (tensor_parallel, pipeline_parallel):
        state_dict = load_nemo_shard(path, tp_rank, pp_rank)
    else:
        _, full = load_nemo(path, shard_layout=family.shard_layout)
        layout = family.shard_layout(config, tensor_parallel, pipeline_parallel)
        state_dict = split_state_dict(full, layout, tp_rank, pp_rank)
    section = family.inference_section(bind(family.model_schema, config, "model"), tensor_parallel, pipeline_parallel)
    tokenizer = tokenizer_of(section.tokenizer)
    model = family.build_inference_model(
        section,
        padded_vocab_of(state_dict, tensor_parallel, tokenizer.vocab_size),
        precision or precision_of(state_dict),
    )
    load_weights(model, state_dict, str(path))
    return model, tokenizer
