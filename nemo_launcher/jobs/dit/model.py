"""The diffusion transformer (DiT, Peebles & Xie 2022) on megatron-core layers.

    config = transformer_config(cfg.model, "bf16", on_gpu=True, use_te=True)
    chunk = dit_chunk(cfg.model, config, 0, use_te, stage)      # what the recipe gives the trainer core
    per_token = chunk(noisy_latents, timesteps, text, target)  # [b, tokens] squared error, this rank's tokens
    prediction = chunk(noisy_latents, timesteps, text)         # [b, C, T, H, W] (sampling; CP = 1)

Latents [C, T, H, W] are cut into patches of patch_temporal x patch_spatial x patch_spatial (patchify), each a
token; learned per-axis position tables are added. The timestep (and, without cross-attention, the mean of the
text tokens) gives one conditioning vector per sample; every block turns it into shift, scale and gate of its
sub-layers (adaLN-Zero: the gates start at 0, so each block starts as the identity). With cross_attention the
blocks also attend to the text tokens. Attention, cross-attention and MLP are megatron-core's (local spec, or
Transformer Engine's where installed), so tensor, sequence and context parallelism and the distributed optimizer
apply as to GPT.
"""

import math

import torch
import torch.nn.functional as F

from ..core.recipe import ChunkStage
from ..core.transformer import shared_transformer_settings

FREQUENCY_DIM = 256  # sinusoidal features of the timestep, before its MLP


def transformer_config(model, precision: str, on_gpu: bool, use_te: bool):
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        **shared_transformer_settings(model, precision, on_gpu, use_te),
        num_layers=model.num_layers,
        qk_layernorm=model.qk_layernorm,
        normalization="LayerNorm",
        activation_func=F.gelu,
        add_bias_linear=True,
        gated_linear_unit=False,
        # DiT's norms carry no affine terms of their own meaning: adaLN supplies scale and shift.
        bias_activation_fusion=False,
    )


def patchify(latents: torch.Tensor, pt: int, p: int) -> torch.Tensor:
    """[b, C, T, H, W] -> [b, tokens, C * pt * p * p], tokens in (t, h, w) order."""
    b, c, t, h, w = latents.shape
    x = latents.reshape(b, c, t // pt, pt, h // p, p, w // p, p)
    x = x.permute(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, (t // pt) * (h // p) * (w // p), c * pt * p * p)


def unpatchify(tokens: torch.Tensor, shape, pt: int, p: int) -> torch.Tensor:
    """The inverse of patchify for latents of `shape` [C, T, H, W]."""
    c, t, h, w = shape
    b = tokens.shape[0]
    x = tokens.reshape(b, t // pt, h // p, w // p, c, pt, p, p)
    x = x.permute(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, c, t, h, w)


def timestep_features(timesteps: torch.Tensor, dim: int = FREQUENCY_DIM) -> torch.Tensor:
    """Sinusoidal features of (possibly fractional) timesteps, [b] -> [b, dim], as in DiT and DDPM."""
    half = dim // 2
    frequencies = torch.exp(
        -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    )
    angles = timesteps.float()[:, None] * frequencies[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [s, b, h] normalised, then scaled and shifted per sample ([b, h])."""
    return x * (1 + scale.unsqueeze(0)) + shift.unsqueeze(0)


def _replicated_linear(config, fan_in: int, fan_out: int, init: str = "megatron") -> torch.nn.Linear:
    """A linear layer every tensor-parallel rank holds whole; under sequence parallelism its gradient covers only
    this rank's tokens, so megatron all-reduces it across TP (the `sequence_parallel` attribute).

    init "megatron": normal(init_method_std) like the transformer's layers; "zero": the adaLN-Zero outputs;
    "fan_in": torch's own uniform(+-1/sqrt(fan_in)), for the conditioning embedders, whose output must not shrink
    with the width of their input (a 4096-wide T5 embedding through std-0.02 weights leaves almost nothing)."""
    layer = torch.nn.Linear(fan_in, fan_out, dtype=config.params_dtype)
    with torch.no_grad():
        if init == "zero":
            layer.weight.zero_()
        elif init == "megatron":
            config.init_method(layer.weight)
        layer.bias.zero_()
    for parameter in layer.parameters():
        parameter.sequence_parallel = config.sequence_parallel
    return layer


def _dit_layer_class():
    from megatron.core.transformer.transformer_layer import TransformerLayer

    class DitLayer(TransformerLayer):
        """A transformer layer with adaLN-Zero modulation of its self-attention, cross-attention (when the spec has
        one) and MLP. TransformerBlock hands each layer, besides the hidden states and the context, one per-sample
        tensor: `attention_mask`. DiT's attention is unmasked, so that slot carries the conditioning vector [b, h]
        (and activation recompute saves and replays it like any other input)."""

        def __init__(
            self,
            config,
            submodules,
            layer_number: int = 1,
            hidden_dropout: float | None = None,
            pg_collection=None,
            vp_stage: int | None = None,
        ):
            super().__init__(
                config,
                submodules,
                layer_number=layer_number,
                hidden_dropout=hidden_dropout,
                pg_collection=pg_collection,
                vp_stage=vp_stage,
            )
            from megatron.core.transformer.identity_op import IdentityOp

            self.has_cross_attention = submodules.cross_attention is not IdentityOp
            parts = 9 if self.has_cross_attention else 6  # shift, scale, gate per sub-layer
            self.adaLN_modulation = torch.nn.Sequential(
                torch.nn.SiLU(), _replicated_linear(config, config.hidden_size, parts * config.hidden_size, init="zero")
            )

        def _residual(self, x, gate, output_and_bias):
            output, bias = output_and_bias
            if bias is not None:
                output = output + bias
            output = F.dropout(output, p=self.hidden_dropout, training=self.training)
            return x + gate.unsqueeze(0) * output

        def forward(self, hidden_states, attention_mask=None, context=None, context_mask=None, **unused):
            mods = self.adaLN_modulation(attention_mask).chunk(9 if self.has_cross_attention else 6, dim=-1)
            x = hidden_states
            x = self._residual(
                x,
                mods[2],
                self.self_attention(_modulate(self.input_layernorm(x), mods[0], mods[1]), attention_mask=None),
            )
            rest = mods[3:]
            if self.has_cross_attention:
                x = self._residual(
                    x,
                    rest[2],
                    self.cross_attention(
                        _modulate(self.pre_cross_attn_layernorm(x), rest[0], rest[1]),
                        attention_mask=None,
                        key_value_states=context,
                    ),
                )
                rest = rest[3:]
            x = self._residual(x, rest[2], self.mlp(_modulate(self.pre_mlp_layernorm(x), rest[0], rest[1])))
            return x, context

    return DitLayer


def layer_spec(cross_attention: bool, qk_layernorm: bool, use_te: bool):
    """ModuleSpec of one DiT layer: megatron-core attention, cross-attention and MLP from the local or TE backend."""
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.transformer.attention import (
        CrossAttention,
        CrossAttentionSubmodules,
        SelfAttention,
        SelfAttentionSubmodules,
    )
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.mlp import MLP, MLPSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayerSubmodules

    if use_te:
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider

        backend = TESpecProvider()
    else:
        backend = LocalSpecProvider()
    norm = backend.layer_norm()
    qk_norm = backend.layer_norm(for_qk=True) if qk_layernorm else IdentityOp
    column, row, core = backend.column_parallel_linear(), backend.row_parallel_linear(), backend.core_attention()
    cross = IdentityOp
    if cross_attention:
        cross = ModuleSpec(
            module=CrossAttention,
            params={"attn_mask_type": AttnMaskType.no_mask},
            submodules=CrossAttentionSubmodules(
                linear_q=column, linear_kv=column, core_attention=core, linear_proj=row
            ),
        )
    return ModuleSpec(
        module=_dit_layer_class(),
        submodules=TransformerLayerSubmodules(
            input_layernorm=norm,
            self_attention=ModuleSpec(
                module=SelfAttention,
                params={"attn_mask_type": AttnMaskType.no_mask},
                submodules=SelfAttentionSubmodules(
                    linear_qkv=column, core_attention=core, linear_proj=row, q_layernorm=qk_norm, k_layernorm=qk_norm
                ),
            ),
            pre_cross_attn_layernorm=norm if cross_attention else IdentityOp,
            cross_attention=cross,
            pre_mlp_layernorm=norm,
            mlp=ModuleSpec(module=MLP, submodules=MLPSubmodules(linear_fc1=column, linear_fc2=row)),
        ),
    )


def _dit_class():
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.transformer_block import TransformerBlock

    class DiT(MegatronModule):
        def __init__(self, config, model, use_te: bool):
            super().__init__(config)
            from megatron.core.enums import ModelType

            self.model_type = ModelType.encoder_or_decoder  # what megatron-core's schedules ask a model
            h = config.hidden_size
            c, t, height, width = model.data.latent_shape
            self.latent_shape = (c, t, height, width)
            self.pt, self.p = model.patch_temporal, model.patch_spatial
            self.grid = (t // self.pt, height // self.p, width // self.p)
            self.cross_attention = model.cross_attention
            patch = c * self.pt * self.p * self.p
            self.x_embedder = _replicated_linear(config, patch, h)
            # Learned per-axis positions, summed: emb_t[t] + emb_h[y] + emb_w[x] for the token at (t, y, x).
            self.pos_embedder = torch.nn.ParameterDict(
                {
                    name: torch.nn.Parameter(torch.empty(size, h, dtype=config.params_dtype))
                    for name, size in zip(("emb_t", "emb_h", "emb_w"), self.grid)
                }
            )
            for table in self.pos_embedder.values():
                torch.nn.init.normal_(table, std=0.02)
                table.sequence_parallel = config.sequence_parallel
            self.t_embedder = torch.nn.Sequential(
                _replicated_linear(config, FREQUENCY_DIM, h, init="fan_in"),
                torch.nn.SiLU(),
                _replicated_linear(config, h, h, init="fan_in"),
            )
            self.text_embedder = torch.nn.Sequential(
                _replicated_linear(config, model.text_embedding_dim, h, init="fan_in"),
                torch.nn.SiLU(),
                _replicated_linear(config, h, h, init="fan_in"),
            )
            self.decoder = TransformerBlock(
                config, layer_spec(model.cross_attention, model.qk_layernorm, use_te), post_layer_norm=False
            )
            self.final_norm = torch.nn.LayerNorm(h, elementwise_affine=False, eps=config.layernorm_epsilon)
            self.final_modulation = torch.nn.Sequential(
                torch.nn.SiLU(), _replicated_linear(config, h, 2 * h, init="zero")
            )
            self.final_linear = _replicated_linear(config, h, patch, init="zero")

        def set_input_tensor(self, input_tensor) -> None:
            # One pipeline stage: the schedule hands None.
            self.decoder.set_input_tensor(input_tensor[0] if isinstance(input_tensor, list) else input_tensor)

        def _positions(self) -> torch.Tensor:
            t, y, x = (table for table in self.pos_embedder.values())
            return (t[:, None, None] + y[None, :, None] + x[None, None, :]).reshape(-1, t.shape[-1])

        def _token_slice(self, tokens: int) -> slice:
            """This context-parallel rank's contiguous share of a sample's tokens (attention is unmasked, so any
            even split works)."""
            size = parallel_state.get_context_parallel_world_size()
            share = tokens // size
            rank = parallel_state.get_context_parallel_rank()
            return slice(rank * share, (rank + 1) * share)

        def forward(self, latents, timesteps, text, target=None):
            tokens = patchify(latents, self.pt, self.p)  # [b, s, patch]
            part = self._token_slice(tokens.shape[1])
            x = self.x_embedder(tokens[:, part]) + self._positions()[part].unsqueeze(0)
            x = x.transpose(0, 1).contiguous()  # [s, b, h], megatron's layout
            condition = self.t_embedder(timestep_features(timesteps).to(x.dtype))
            text_tokens = self.text_embedder(text)  # [b, L, h]
            context = None
            if self.cross_attention:
                context = text_tokens.transpose(0, 1).contiguous()
            else:
                condition = condition + text_tokens.mean(dim=1)
            if self.config.sequence_parallel:
                x = tensor_parallel.scatter_to_sequence_parallel_region(x)
                if context is not None:
                    context = tensor_parallel.scatter_to_sequence_parallel_region(context)
            x = self.decoder(x, attention_mask=condition, context=context)
            if self.config.sequence_parallel:
                x = tensor_parallel.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=True)
            shift, scale = self.final_modulation(condition).chunk(2, dim=-1)
            out = self.final_linear(_modulate(self.final_norm(x), shift, scale)).transpose(0, 1)  # [b, s, patch]
            if target is None:
                return unpatchify(out, self.latent_shape, self.pt, self.p)
            goal = patchify(target, self.pt, self.p)[:, part]
            return (out.float() - goal.float()).pow(2).mean(dim=-1)  # [b, s] per-token squared error

    return DiT


def dit_chunk(model, config, vocab_size: int, use_te: bool, stage: ChunkStage):
    """The whole model (DiT runs on one pipeline stage: the schema keeps PP at 1); vocab_size is unused."""
    return _dit_class()(config, model, use_te)


def flops_per_token(model, vocab_size: int) -> float:
    """Model FLOPs per latent token, forward and backward (3 x forward), matrix products only: the linear layers
    (2 FLOPs per weight) and attention over the sample's tokens and, with cross-attention, its text tokens."""
    h, s = model.hidden_size, model.data.seq_length
    linear = 4 * h * h + 2 * h * model.ffn_hidden_size + (9 if model.cross_attention else 6) * h * h
    attention = 2 * h * s
    if model.cross_attention:
        linear += 2 * h * h  # query and output projections (keys and values are per text token)
        attention += 2 * h * model.data.text_length
    return 3 * model.num_layers * (2 * linear + 2 * attention)
