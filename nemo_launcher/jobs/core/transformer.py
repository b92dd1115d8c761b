"""Model building that is the same for every family: layer-spec choice, vocabulary padding, the TransformerConfig
settings every family sets alike, and one chunk per virtual pipeline stage.

    config = TransformerConfig(**shared_transformer_settings(model, "bf16", on_gpu=True, use_te=True),
                               num_layers=..., activation_func=...)        # a family's own keys added
    chunks = build_chunks(recipe, model, config, vocab_size, use_te)   # recipe.build_chunk per stage
"""

import contextlib
import os
from typing import Any

import torch

from ...contract.schemas.common_training import DecoderStackSection
from .recipe import ChunkStage

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def transformer_engine_available() -> bool:
    """True when Transformer Engine's PyTorch extension loads (the bare PyPI meta package raises RuntimeError)."""
    try:
        import transformer_engine.pytorch  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        return False
    return True


def padded_vocab_size(vocab_size: int, divisible_by: int, tensor_parallel_size: int) -> int:
    """Megatron pads the vocabulary so each TP rank's slice of the embedding has the same, aligned size."""
    multiple = divisible_by * tensor_parallel_size
    return -(-vocab_size // multiple) * multiple


def virtual_stages(model) -> Any:
    """model.virtual_pipeline_model_parallel_size as megatron-core wants it: None unless it is above 1."""
    chunks = model.virtual_pipeline_size() if isinstance(model, DecoderStackSection) else 1
    return chunks if chunks > 1 else None


def apex_available() -> bool:
    """megatron-core's local layer spec uses Apex's fused LayerNorm (and its softmax kernels) when Apex imports."""
    from megatron.core.models.gpt import gpt_layer_specs

    return bool(getattr(gpt_layer_specs, "HAVE_APEX", False))


def _fusions(model, precision: str, on_gpu: bool, use_te: bool) -> dict[str, Any]:
    """The fusion keys (the reference's defaults where a family has none) as megatron-core can honour them: each is
    a CUDA kernel, so none on a CPU; the local spec's LayerNorm and softmax kernels are Apex's, and Transformer
    Engine layers bring their own."""
    asked = {
        name: getattr(model, name, default)
        for name, default in (
            ("bias_dropout_add_fusion", True),
            ("masked_softmax_fusion", True),
            ("persist_layer_norm", True),
            ("gradient_accumulation_fusion", True),
            ("apply_query_key_layer_scaling", False),
        )
    }
    apex_kernels = on_gpu and not use_te and apex_available()
    return dict(
        bias_dropout_fusion=on_gpu and asked["bias_dropout_add_fusion"],
        masked_softmax_fusion=asked["masked_softmax_fusion"] and apex_kernels,
        persist_layer_norm=asked["persist_layer_norm"] and apex_kernels,
        gradient_accumulation_fusion=on_gpu and use_te and asked["gradient_accumulation_fusion"],
        # As in the reference: query-key layer scaling guards fp16's softmax range; bf16 and fp32 need none.
        apply_query_key_layer_scaling=asked["apply_query_key_layer_scaling"] and precision == "fp16",
    )


def _tp_overlap(model) -> dict[str, Any]:
    """Transformer Engine userbuffers: TP communication overlapped with the GEMMs (the trainer initialises them)."""
    if not getattr(model, "ub_tp_comm_overlap", False):
        return {}
    return dict(
        tp_comm_overlap=True, tp_comm_atomic_ag=model.tp_comm_atomic_ag, tp_comm_atomic_rs=model.tp_comm_atomic_rs
    )


def attention_backend(use_te: bool, environ=None):
    """megatron-core's AttnBackend that agrees with the NVTE_*_ATTN variables the job exports.

    megatron-core asserts that those variables match its backend (its default, auto, wants them unset or 1), while
    the reference's GPT environment exports NVTE_FUSED_ATTN=0 to keep Transformer Engine off cuDNN's fused kernel.
    So the backend follows the environment: the local layer spec has one attention (local, every variable 0); with
    Transformer Engine, a 0 for fused selects flash, a 0 for flash selects fused, both 0 unfused, none auto."""
    from megatron.core.transformer.enums import AttnBackend

    if not use_te:
        return AttnBackend.local
    environ = os.environ if environ is None else environ
    off = {name for name in ("FLASH", "FUSED", "UNFUSED") if environ.get(f"NVTE_{name}_ATTN") == "0"}
    if {"FLASH", "FUSED"} <= off:
        return AttnBackend.unfused
    if "FUSED" in off:
        return AttnBackend.flash
    if "FLASH" in off:
        return AttnBackend.fused
    return AttnBackend.auto


def shared_transformer_settings(model, precision: str, on_gpu: bool, use_te: bool) -> dict[str, Any]:
    """TransformerConfig keyword arguments read from the `model` keys every family has (widths, heads, dropout,
    initialisation, parallel layout, recompute), and the precision, fusion and pipeline settings that follow from
    where the run is. A family adds the layer count, activation, normalisation and anything else of its own."""
    dtype = DTYPES[precision]
    recompute = {}
    granularity = getattr(model, "activations_checkpoint_granularity", None)
    if granularity is not None:
        recompute["recompute_granularity"] = granularity
    if granularity == "full":
        recompute["recompute_method"] = model.activations_checkpoint_method
        recompute["recompute_num_layers"] = model.activations_checkpoint_num_layers
    overlap_p2p = getattr(model, "overlap_p2p_comm", False)
    return dict(
        hidden_size=model.hidden_size,
        ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        kv_channels=model.kv_channels,
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        init_method_std=model.init_method_std,
        layernorm_epsilon=model.layernorm_epsilon,
        tensor_model_parallel_size=model.tensor_model_parallel_size,
        pipeline_model_parallel_size=model.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_stages(model),
        context_parallel_size=getattr(model, "context_parallel_size", 1),
        sequence_parallel=getattr(model, "sequence_parallel", False),
        use_cpu_initialization=model.use_cpu_initialization,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        overlap_p2p_comm=overlap_p2p,
        batch_p2p_comm=getattr(model, "batch_p2p_comm", not overlap_p2p) and not overlap_p2p,
        batch_p2p_sync=getattr(model, "sync_batch_comm", True),
        fp32_residual_connection=getattr(model, "fp32_residual_connection", False),
        # Freeing a stage's output once sent saves GPU memory; on the CPU gloo still reads it.
        deallocate_pipeline_outputs=on_gpu,
        attention_backend=attention_backend(use_te),
        **_fusions(model, precision, on_gpu, use_te),
        **_tp_overlap(model),
        **recompute,
    )


def language_model_settings(model, stage: ChunkStage) -> dict[str, Any]:
    """The keyword arguments megatron-core's language models (GPTModel, BertModel, T5Model) take alike from the
    `model:` section and the chunk's pipeline stage."""
    return dict(
        max_sequence_length=model.max_position_embeddings,
        pre_process=stage.pre_process,
        post_process=stage.post_process,
        share_embeddings_and_output_weights=model.share_embeddings_and_output_weights,
        position_embedding_type=model.position_embedding_type,
    )


def userbuffer_settings(model, config) -> dict[str, Any]:
    """Transformer Engine's initialize_ub arguments: one [tokens of a microbatch on this rank, hidden] buffer shape,
    the TP size, FP8 or not, and the per-GEMM settings of model.ub_tp_comm_overlap_cfg (TE's defaults for the rest)."""
    overlap = getattr(model, "ub_tp_comm_overlap_cfg", None)
    tokens = model.encoder_seq_length * model.micro_batch_size // config.context_parallel_size
    return dict(
        shape=[tokens, model.hidden_size],
        tp_size=config.tensor_model_parallel_size,
        use_fp8=config.fp8 is not None,
        dtype=config.params_dtype,
        ub_cfgs=overlap.ub_cfgs() if overlap is not None else None,
    )


def initialize_userbuffers(settings: dict[str, Any]) -> None:
    from transformer_engine.pytorch.module.base import initialize_ub

    initialize_ub(**settings)


def chunk_stages(config) -> list[ChunkStage]:
    """One entry per model chunk of this rank: one, or one per virtual stage with the interleaved schedule."""
    from megatron.core import parallel_state

    vpp = config.virtual_pipeline_model_parallel_size
    stages = []
    for index in range(vpp or 1):
        stage = index if vpp else None
        stages.append(
            ChunkStage(
                vp_stage=stage,
                pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
            )
        )
    return stages


def cpu_build_context():
    """Around model construction on a CPU: some megatron-core constructors call Tensor.cuda() (mcore_cpu.py)."""
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    from ..common.mcore_cpu import tensor_cuda_is_noop

    return tensor_cuda_is_noop()


def build_chunks(build_chunk, model, config, vocab_size: int, use_te: bool) -> list[torch.nn.Module]:
    """Bare model chunks (no precision or DDP wrapper), one per virtual pipeline stage, from a recipe's
    build_chunk. The parallel state must be initialised."""
    with cpu_build_context():
        return [build_chunk(model, config, vocab_size, use_te, stage) for stage in chunk_stages(config)]
