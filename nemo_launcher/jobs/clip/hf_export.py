"""A Hugging Face `CLIPModel` folder (config.json, model.safetensors, the BPE tokenizer files) from a CLIP state dict,
where transformers computes the same image and text embeddings as our model.

    architecture = hf_architecture(model_config)     # "CLIPModel", or HFExportError with the reasons
    export_hf(model_config, state_dict, out_dir, dtype=None)

Layer by layer the two are the same model: a patch convolution without bias, one class token and learned
positions, a LayerNorm before the encoder, pre-norm layers (attention with biases, exact-erf gelu MLP), the class
token's output normalised and projected without bias; a causal text transformer with learned positions, a final
LayerNorm and the features at the end token, projected without bias; a learned log-temperature. What has no form
there, and is refused with the reason:
- more than one class token (Hugging Face has one), non-square images, per-head sizes other than hidden / heads;
- the byte tokenizer: its end token has id 2, and transformers reads the caption features of a model whose
  eos_token_id is 2 at the largest token id (its rule for checkpoints made before it read the end token), which is
  the caption's largest byte, not its end. CLIP's BPE (tokenizer library clip) has no such clash.
Megatron keeps q, k and v of each head together in one linear_qkv ([head][q|k|v][head size] rows); they are cut
apart here. Our temperature is clamped at logit_scale_max and transformers' is not, so the clamped value is written.
"""

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..core.conversion import HFExportError, save_hf_checkpoint

ARCHITECTURE = "CLIPModel"
_LEGACY_EOS = 2  # transformers' CLIP text model reads the argmax token id when eos_token_id is this


def _head_size_reasons(name: str, tower: Mapping[str, Any]) -> list[str]:
    hidden, heads = int(tower["hidden_size"]), int(tower["num_attention_heads"])
    size = tower.get("kv_channels")
    if size is not None and int(size) * heads != hidden:
        return [f"model.{name}.kv_channels={size}: Hugging Face CLIP's heads are hidden_size / num_attention_heads"]
    return []


def hf_architecture(model: Mapping[str, Any]) -> str:
    vision, text = model["vision"], model["text"]
    reasons = []
    if int(vision.get("class_token_length", 1)) != 1:
        reasons.append(
            f"model.vision.class_token_length={vision['class_token_length']}: Hugging Face CLIP has one class token"
        )
    if int(vision["img_h"]) != int(vision["img_w"]):
        reasons.append(
            f"model.vision.img_h={vision['img_h']} != img_w={vision['img_w']}: Hugging Face CLIP's images are square"
        )
    reasons += _head_size_reasons("vision", vision) + _head_size_reasons("text", text)
    if model["tokenizer"]["library"] == "byte":
        reasons.append(
            "model.tokenizer.library=byte: its end token id is 2, and transformers' CLIP reads the features "
            "of a model with eos_token_id 2 at the largest token id, not at the end token; train with "
            "library clip (CLIP's BPE)"
        )
    if reasons:
        raise HFExportError("; ".join(reasons))
    return ARCHITECTURE


def _split_qkv(
    prefix_in: str, prefix_out: str, state: Mapping[str, torch.Tensor], heads: int
) -> dict[str, torch.Tensor]:
    out = {}
    for kind in ("weight", "bias"):
        fused = state[f"{prefix_in}.self_attention.linear_qkv.{kind}"]
        grouped = fused.reshape(heads, 3, -1, *fused.shape[1:])
        for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{prefix_out}.self_attn.{name}.{kind}"] = grouped[:, index].reshape(-1, *fused.shape[1:])
    return out


def _layers(prefix_in: str, prefix_out: str, state: Mapping[str, torch.Tensor], tower: Mapping[str, Any]):
    out = {}
    for n in range(int(tower["num_layers"])):
        source, target = f"{prefix_in}.layers.{n}", f"{prefix_out}.encoder.layers.{n}"
        out.update(_split_qkv(source, target, state, int(tower["num_attention_heads"])))
        for ours, theirs in (
            ("input_layernorm", "layer_norm1"),
            ("pre_mlp_layernorm", "layer_norm2"),
            ("self_attention.linear_proj", "self_attn.out_proj"),
            ("mlp.linear_fc1", "mlp.fc1"),
            ("mlp.linear_fc2", "mlp.fc2"),
        ):
            for kind in ("weight", "bias"):
                out[f"{target}.{theirs}.{kind}"] = state[f"{source}.{ours}.{kind}"]
    return out


def hf_tensors(model: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' CLIPModel parameter names -> tensors of our TP=1 state dict."""
    vision, text = model["vision"], model["text"]
    out = {
        "vision_model.embeddings.class_embedding": state["vision.class_token"].reshape(-1),
        "vision_model.embeddings.patch_embedding.weight": state["vision.conv1.weight"],
        "vision_model.embeddings.position_embedding.weight": state["vision.position_embeddings.weight"],
        "vision_model.pre_layrnorm.weight": state["vision.ln_pre.weight"],
        "vision_model.pre_layrnorm.bias": state["vision.ln_pre.bias"],
        "vision_model.post_layernorm.weight": state["vision_norm.weight"],
        "vision_model.post_layernorm.bias": state["vision_norm.bias"],
        "visual_projection.weight": state["vision_projection.weight"],
        "text_model.embeddings.token_embedding.weight": state["embedding.word_embeddings.weight"],
        "text_model.embeddings.position_embedding.weight": state["embedding.position_embeddings.weight"],
        "text_model.final_layer_norm.weight": state["text.final_layernorm.weight"],
        "text_model.final_layer_norm.bias": state["text.final_layernorm.bias"],
        "text_projection.weight": state["text_projection.weight"],
        "logit_scale": state["logit_scale"].clamp(max=float(model.get("logit_scale_max", math.inf))),
    }
    out.update(_layers("vision.decoder", "vision_model", state, vision))
    out.update(_layers("text", "text_model", state, text))
    return out


def hf_config(model: Mapping[str, Any], vocab_rows: int, bos: int, eos: int) -> dict[str, Any]:
    vision, text = model["vision"], model["text"]

    def tower(section):
        return {
            "hidden_size": int(section["hidden_size"]),
            "intermediate_size": int(section["ffn_hidden_size"]),
            "num_hidden_layers": int(section["num_layers"]),
            "num_attention_heads": int(section["num_attention_heads"]),
            "hidden_act": "gelu",
            "layer_norm_eps": float(section.get("layernorm_epsilon", 1e-5)),
            "projection_dim": int(model["output_dim"]),
        }

    return {
        "architectures": [ARCHITECTURE],
        "model_type": "clip",
        "projection_dim": int(model["output_dim"]),
        "logit_scale_init_value": float(model.get("logit_scale_init", 2.6592)),
        "text_config": {
            **tower(text),
            "vocab_size": vocab_rows,
            "max_position_embeddings": int(text["max_position_embeddings"]),
            # Our captions are padded with id 0 after the end token (multimodal/caption_tokenizer.py).
            "bos_token_id": bos,
            "eos_token_id": eos,
            "pad_token_id": 0,
        },
        "vision_config": {
            **tower(vision),
            "image_size": int(vision["img_h"]),
            "patch_size": int(vision["patch_dim"]),
            "num_channels": 3,
        },
    }


def export_hf(model: Mapping[str, Any], state: Mapping[str, torch.Tensor], out_dir, dtype: torch.dtype | None) -> str:
    """Writes the folder; the vocabulary rows stay padded (token ids above the tokenizer's are never produced)."""
    from ..multimodal.caption_tokenizer import ClipBpeTokenizer

    architecture = hf_architecture(model)
    tokenizer = ClipBpeTokenizer(model["tokenizer"]["vocab_file"], model["tokenizer"]["merge_file"])
    if tokenizer.eos == _LEGACY_EOS:
        raise HFExportError(
            f"the tokenizer's end token has id {_LEGACY_EOS}, which transformers' CLIP reads as the "
            "largest token id instead"
        )
    tensors = hf_tensors(model, state)
    rows = int(tensors["text_model.embeddings.token_embedding.weight"].shape[0])
    save_hf_checkpoint(
        out_dir,
        tensors,
        hf_config(model, rows, tokenizer.bos, tokenizer.eos),
        dtype or tensors["visual_projection.weight"].dtype,
    )
    tokenizer.hf.save_pretrained(str(out_dir))
    return architecture
