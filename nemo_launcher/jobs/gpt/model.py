"""megatron-core GPTModel chunks from `model.*`.

    config = transformer_config(cfg.model, precision="bf16", on_gpu=True, use_te=True)
    chunks = build_gpt_chunks(cfg.model, config, vocab_size=50304, use_te=True)  # padded (core.transformer)

One chunk per virtual pipeline stage (one chunk when the schedule is not interleaved); `gpt_chunk` builds one,
which is what the GPT recipe gives the trainer core. On a GPU with Transformer Engine the TE layer spec is used;
otherwise megatron-core's local spec, which also runs on a CPU. The parallel state (TP, PP, VPP) must already be
initialised.
"""

import logging

import torch
import torch.nn.functional as F

from ...contract.schemas.gpt_training import ModelSection
from ..common.config import JobConfigError
from ..core.recipe import ChunkStage
from ..core.transformer import build_chunks, language_model_settings, shared_transformer_settings

log = logging.getLogger(__name__)


class ZeroCenteredLayerNorm(torch.nn.Module):
    """LayerNorm that stores gamma - 1 (NeMo's `layernorm1p`), for the local spec, whose torch norm refuses it.

    Weight decay pulls the stored value towards 0, i.e. gamma towards 1. Transformer Engine stores its
    zero-centred gamma the same way, so checkpoints move between this and TE unchanged.
    """

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **unused):
        super().__init__()
        self.normalized_shape = (hidden_size,)
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(hidden_size, dtype=config.params_dtype))
        self.bias = torch.nn.Parameter(torch.zeros(hidden_size, dtype=config.params_dtype))

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight + 1, self.bias, self.eps)


def _activation(model: ModelSection):
    """(activation function, gated) for `model.activation`."""
    if model.activation == "gelu":
        return F.gelu, False
    if model.activation == "fast-swiglu":
        return F.silu, True
    from megatron.core.activations import squared_relu

    return squared_relu, False


def transformer_config(model: ModelSection, precision: str, on_gpu: bool, use_te: bool):
    from megatron.core.transformer import TransformerConfig

    activation, gated = _activation(model)
    fp8 = {}
    if model.fp8:
        fp8 = dict(
            fp8="e4m3" if model.fp8_e4m3 else "hybrid",
            fp8_margin=model.fp8_margin,
            fp8_interval=model.fp8_interval,
            fp8_amax_history_len=model.fp8_amax_history_len,
            fp8_amax_compute_algo=model.fp8_amax_compute_algo,
            fp8_wgrad=model.fp8_wgrad,
        )
    # Fusions are CUDA kernels; megatron's gelu fusion also needs a bias and only gelu/swiglu are fused.
    fusable = (model.activation == "gelu" and model.bias) or model.activation == "fast-swiglu"
    fuse_activation = on_gpu and model.bias_activation_fusion and fusable
    return TransformerConfig(
        **shared_transformer_settings(model, precision, on_gpu, use_te),
        num_layers=model.num_layers,
        num_query_groups=model.num_query_groups,
        normalization="RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm",
        layernorm_zero_centered_gamma=model.normalization == "layernorm1p",
        add_bias_linear=model.bias,
        gated_linear_unit=gated,
        activation_func=activation,
        bias_activation_fusion=fuse_activation,
        add_qkv_bias=model.qkv_bias,
        **fp8,
        **_experts(model),
    )


def _experts(model: ModelSection) -> dict:
    """TransformerConfig's MoE settings (none for a dense model). Each expert is as wide as a dense MLP
    (ffn_hidden_size), set here so megatron-core does not warn that it chose so."""
    if model.num_moe_experts is None:
        return {}
    return dict(
        num_moe_experts=model.num_moe_experts,
        moe_ffn_hidden_size=model.ffn_hidden_size,
        moe_router_topk=model.moe_router_topk,
        moe_aux_loss_coeff=model.moe_aux_loss_coeff,
        moe_router_load_balancing_type=model.moe_router_load_balancing_type,
        moe_z_loss_coeff=model.moe_z_loss_coeff,
        moe_input_jitter_eps=model.moe_input_jitter_eps,
        moe_token_dispatcher_type=model.moe_token_dispatcher_type,
        moe_grouped_gemm=model.moe_grouped_gemm,
        expert_model_parallel_size=model.expert_model_parallel_size,
    )


def _layer_spec(model: ModelSection, config, use_te: bool, vp_stage: int | None):
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )

    experts = dict(num_experts=model.num_moe_experts, moe_grouped_gemm=model.moe_grouped_gemm)
    if use_te:
        return get_gpt_layer_with_transformer_engine_spec(**experts)
    layer = get_gpt_layer_local_spec(normalization=config.normalization, **experts)
    if not config.layernorm_zero_centered_gamma:
        return layer
    # The local spec's torch norm asserts on zero-centred gamma; swap in ours for every norm of the block.
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    layer.submodules.input_layernorm = ZeroCenteredLayerNorm
    layer.submodules.pre_mlp_layernorm = ZeroCenteredLayerNorm
    count = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[layer] * count, layer_norm=ZeroCenteredLayerNorm)


def check_model_support(model: ModelSection, on_gpu: bool, use_te: bool) -> None:
    """Settings that cannot work with the chosen layer spec fail here, before any weight is allocated."""
    if model.fp8 and not use_te:
        raise JobConfigError("model.fp8: FP8 needs Transformer Engine on GPUs; install it or set fp8: false")
    if model.context_parallel_size > 1 and not use_te:
        raise JobConfigError(
            f"model.context_parallel_size: {model.context_parallel_size} needs Transformer Engine's "
            "attention on GPUs (megatron-core's local attention holds whole sequences)"
        )
    for switch, what in (
        ("ub_tp_comm_overlap", "userbuffers are Transformer Engine's"),
        ("fsdp", "megatron-core's FSDP wrapper imports Transformer Engine"),
    ):
        if getattr(model, switch) and not use_te:
            raise JobConfigError(f"model.{switch}: {what}, which does not load here; install it or set {switch}: false")
    if model.moe_grouped_gemm and not use_te:
        raise JobConfigError(
            "model.moe_grouped_gemm: the grouped expert GEMM runs on GPUs with Transformer Engine; "
            "set moe_grouped_gemm: false here"
        )
    if model.data.reset_attention_mask and use_te:
        raise JobConfigError(
            "model.data.reset_attention_mask: the Transformer Engine spec applies a plain causal mask; "
            "set model.transformer_engine: false to use per-document masks"
        )


def build_gpt_chunks(model: ModelSection, config, vocab_size: int, use_te: bool) -> list[torch.nn.Module]:
    """Bare GPTModel chunks (no precision or DDP wrapper), one per virtual pipeline stage."""
    return build_chunks(gpt_chunk, model, config, vocab_size, use_te)


def gpt_model_settings(model: ModelSection, stage: ChunkStage) -> dict:
    """GPTModel's keyword arguments other than the config, the layer spec and the vocabulary size."""
    return dict(
        **language_model_settings(model, stage),
        rotary_percent=model.rotary_percentage,
        rope_scaling=model.rope_scaling,
        rope_scaling_factor=model.rope_scaling_factor,
        rotary_base=model.rotary_base,
        fp16_lm_cross_entropy=model.fp16_lm_cross_entropy,
        vp_stage=stage.vp_stage,
    )


def _define_missing_te_gemm() -> None:
    """megatron-core 0.16's router reads moe_utils.te_general_gemm, which that module defines only when Transformer
    Engine imports: without TE every MoE forward pass dies with a NameError. None is what the router checks for."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def gpt_chunk(model: ModelSection, config, vocab_size: int, use_te: bool, stage: ChunkStage):
    from megatron.core.models.gpt import GPTModel

    if model.num_moe_experts is not None:
        _define_missing_te_gemm()

    return GPTModel(
        config=config,
        transformer_layer_spec=_layer_spec(model, config, use_te, stage.vp_stage),
        vocab_size=vocab_size,
        **gpt_model_settings(model, stage),
    )
