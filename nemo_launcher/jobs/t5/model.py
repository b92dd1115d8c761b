"""megatron-core T5Model chunks from the T5 schema's `model.*` (T5 and mT5 alike).

    config = transformer_config(cfg.model, precision="bf16", on_gpu=True, use_te=True)     # the decoder's
    chunk = t5_chunk(cfg.model, config, vocab_size=32128, use_te=True, stage=ChunkStage(None, True, True))

One width for both stacks; the encoder's TransformerConfig is the decoder's with encoder_num_layers. On a GPU
with Transformer Engine the TE block specs are used; otherwise megatron-core's local layer specs, which also
run on a CPU, with two changes: each stack gets its final norm (0.16's local block specs name TENorm there,
which is None without Transformer Engine, so the stacks would end unnormalised), and with relative positions
the self-attention takes the position bias (attention_bias.py). Pipeline parallelism is 1 (the schema's rule).

`model.activation`: gelu and relu are one up-projection; geglu, swiglu and reglu gate it with a second one.
geglu's GELU is the tanh approximation: T5 v1.1's and mT5's function, Hugging Face's `gated-gelu`, and what
megatron-core's fused geglu kernel computes on GPUs, so CPU and GPU runs compute the same function.
"""

import dataclasses

import torch
import torch.nn.functional as F

from ...contract.schemas.t5_training import T5ModelSection
from ..core.recipe import ChunkStage
from ..core.transformer import language_model_settings, shared_transformer_settings

GATED = ("geglu", "swiglu", "reglu")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def activation_of(name: str):
    """(activation function, gated linear unit) for `model.activation`."""
    functions = {"gelu": F.gelu, "relu": F.relu, "geglu": gelu_tanh, "swiglu": F.silu, "reglu": F.relu}
    return functions[name], name in GATED


def _fused_activation(model: T5ModelSection, on_gpu: bool):
    """megatron-core fuses bias + activation on GPUs for swiglu and for geglu (its geglu kernel is the tanh
    GELU); it wants F.gelu as the function to pick that kernel. Plain gelu is left unfused: the fused kernel
    would compute the tanh approximation instead of the exact GELU the CPU computes."""
    if on_gpu and model.activation == "swiglu":
        return F.silu
    if on_gpu and model.activation == "geglu":
        return F.gelu
    return None


def transformer_config(model: T5ModelSection, precision: str, on_gpu: bool, use_te: bool):
    """The decoder's TransformerConfig (what T5Model calls `config`); t5_chunk derives the encoder's from it."""
    from megatron.core.transformer import TransformerConfig

    activation, gated = activation_of(model.activation)
    fused = _fused_activation(model, on_gpu)
    return TransformerConfig(
        **shared_transformer_settings(model, precision, on_gpu, use_te),
        num_layers=model.decoder_num_layers,
        normalization="RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm",
        add_bias_linear=model.bias,
        gated_linear_unit=gated,
        activation_func=fused or activation,
        bias_activation_fusion=fused is not None,
    )


def _block_specs(model: T5ModelSection, use_te: bool):
    """(encoder block spec, decoder block spec)."""
    from megatron.core.models.T5 import t5_spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    if use_te:
        return (
            t5_spec.get_t5_encoder_with_transformer_engine_block_spec(model.encoder_num_layers),
            t5_spec.get_t5_decoder_with_transformer_engine_block_spec(model.decoder_num_layers),
        )
    encoder_layer, decoder_layer = t5_spec.encoder_model_with_local_spec(), t5_spec.decoder_model_with_local_spec()
    norm = encoder_layer.submodules.input_layernorm
    if model.normalization == "rmsnorm":
        # The local specs' norm is Apex's LayerNorm where Apex is installed, which has no RMSNorm; torch's has both.
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        norm = WrappedTorchNorm
        for layer in (encoder_layer, decoder_layer):
            layer.submodules.input_layernorm = layer.submodules.pre_mlp_layernorm = norm
        decoder_layer.submodules.pre_cross_attn_layernorm = norm
    if model.position_embedding_type == "relative":
        from .attention_bias import BiasedDotProductAttention

        for layer in (encoder_layer, decoder_layer):
            layer.submodules.self_attention.submodules.core_attention = BiasedDotProductAttention
    return (
        TransformerBlockSubmodules([encoder_layer] * model.encoder_num_layers, layer_norm=norm),
        TransformerBlockSubmodules([decoder_layer] * model.decoder_num_layers, layer_norm=norm),
    )


def t5_chunk(model: T5ModelSection, config, vocab_size: int, use_te: bool, stage: ChunkStage):
    """One bare T5Model (encoder and decoder on this rank; the parallel state must be initialised)."""
    from megatron.core.models.T5 import T5Model

    encoder_spec, decoder_spec = _block_specs(model, use_te)
    chunk = T5Model(
        config=config,
        encoder_config=dataclasses.replace(config, num_layers=model.encoder_num_layers),
        transformer_encoder_layer_spec=encoder_spec,
        transformer_decoder_layer_spec=decoder_spec,
        vocab_size=vocab_size,
        **language_model_settings(model, stage),
        relative_attention_num_buckets=model.relative_attention_num_buckets,
        relative_attention_max_distance=model.relative_attention_max_distance,
    )
    # The forward step shapes its attention masks for the spec the chunk was built with (recipe.py).
    chunk.transformer_engine_masks = use_te
    return chunk


def model_flops_per_token(model: T5ModelSection, vocab_size: int) -> float:
    """Model FLOPs (forward + backward: 3 x forward) per token of encoder or decoder input, for MFU.

    A matmul costs 2 FLOPs per weight per token forward; attention 2 x 2 x (keys) x (heads x head size) per
    query token. Per sample: encoder layers over the encoder tokens; decoder layers (self-attention,
    cross-attention, MLP) over the decoder tokens, the cross-attention's keys and values over the encoder
    tokens; the output layer over the decoder tokens. Divided by encoder + decoder tokens, what tokens/s counts.
    """
    h, f = model.hidden_size, model.ffn_hidden_size
    q = (model.kv_channels or h // model.num_attention_heads) * model.num_attention_heads
    se, sd = model.encoder_seq_length, model.data.seq_length_dec
    mlp = 2 * h * f * (2 if model.activation in GATED else 1) + 2 * f * h
    self_attention = lambda keys: 2 * h * 3 * q + 2 * q * h + 4 * q * keys  # noqa: E731
    encoder = se * model.encoder_num_layers * (self_attention(se) + mlp)
    cross = 2 * h * q + 2 * q * h + 4 * q * se
    decoder = (
        sd * model.decoder_num_layers * (self_attention(sd) + cross + mlp)
        + se * model.decoder_num_layers * 2 * h * 2 * q
    )
    output = sd * 2 * h * vocab_size
    return 3.0 * (encoder + decoder + output) / (se + sd)
