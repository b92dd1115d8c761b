"""The vision tower: megatron-core's CLIPViTModel (patch convolution, class tokens, learned positions, a pre-norm,
transformer layers) over the keys of a schema's VisionTower section.

    config = tower_config(tower_keys(model, model.vision), "bf16", on_gpu=True, use_te=True)
    tower = build_tower(model.vision, config, use_te)       # [b, 3, H, W] -> [b, tokens, hidden]

megatron-core 0.16's local ViT layer spec asks for a causal mask, which would let a patch see only the patches
before it; vit_layer_spec swaps in no mask, as its Transformer Engine spec has, so every token sees the image.
"""

import dataclasses
import types

import torch.nn.functional as F

from ..core.transformer import shared_transformer_settings

# Keys every tower's TransformerConfig reads from the model section rather than the tower section.
_MODEL_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "use_cpu_initialization",
    "activations_checkpoint_granularity",
    "activations_checkpoint_method",
    "activations_checkpoint_num_layers",
)


def tower_keys(model, tower):
    """One namespace with a tower's sizes and the model section's layout keys (what shared_transformer_settings
    reads), for families whose model holds several towers."""
    values = {f.name: getattr(tower, f.name) for f in dataclasses.fields(tower)}
    values.update({name: getattr(model, name) for name in _MODEL_KEYS})
    return types.SimpleNamespace(**values)


def tower_config(keys, precision: str, on_gpu: bool, use_te: bool):
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        **shared_transformer_settings(keys, precision, on_gpu, use_te),
        num_layers=keys.num_layers,
        normalization="LayerNorm",
        add_bias_linear=True,
        gated_linear_unit=False,
        activation_func=F.gelu,
        bias_activation_fusion=on_gpu,  # a CUDA kernel
    )


def vit_layer_spec(use_te: bool):
    from megatron.core.models.vision import vit_layer_specs
    from megatron.core.transformer.enums import AttnMaskType

    if use_te:
        return vit_layer_specs.get_vit_layer_with_transformer_engine_spec()
    spec = vit_layer_specs.get_vit_layer_with_local_spec()
    attention = spec.submodules.self_attention
    bidirectional = dataclasses.replace(attention, params={**attention.params, "attn_mask_type": AttnMaskType.no_mask})
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, self_attention=bidirectional))


def norm_class(use_te: bool):
    """The tower's own LayerNorms: Transformer Engine's, or the local spec's (Apex's fused one, else torch's)."""
    if use_te:
        from megatron.core.extensions.transformer_engine import TENorm

        return TENorm
    from megatron.core.models.vision.vit_layer_specs import LNImpl

    return LNImpl


def build_tower(tower, config, use_te: bool):
    """megatron-core's CLIPViTModel for a VisionTower section; build it inside core.transformer.cpu_build_context on
    a CPU (it places its position ids with .cuda())."""
    from megatron.core.models.vision.clip_vit_model import CLIPViTModel

    return CLIPViTModel(
        config,
        vit_layer_spec(use_te),
        ln_pre_impl=norm_class(use_te),
        ln_post_impl=norm_class(use_te),
        add_class_token=True,
        class_token_len=tower.class_token_length,
        patch_dim=tower.patch_dim,
        img_h=tower.img_h,
        img_w=tower.img_w,
    )


def tower_flops_per_image(tower) -> float:
    """Forward + backward FLOPs of one image through the tower's transformer layers (matrix products only)."""
    tokens, hidden, ffn = tower.patches() + tower.class_token_length, tower.hidden_size, tower.ffn_hidden_size
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * ffn) + 4 * tokens * tokens * hidden
    patch = 2 * tower.patches() * hidden * 3 * tower.patch_dim**2
    return 3.0 * (tower.num_layers * per_layer + patch)
