"""A training `model:` section as the sizes the performance model counts with: transformer stacks and what sits
around them (embeddings, heads, a UNet's convolutions).

    shape = shape_of_model(stage["model"])   # None: nothing this model can size (e.g. a VAE-only section)
    shape.stacks[0].layers, shape.vocab, shape.tokens_per_sample

The layout of the section says what it is, as contract/model_facts.py reads it (two towers: CLIP; an encoder and a
decoder: T5; a UNet config: latent diffusion; a latent shape: DiT; an image size: ViT; a binary head: BERT; else a
decoder-only GPT, with GQA, gated MLPs, rotary positions and MoE experts where its keys say so).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from .unet import unet_size
from .vocabulary import padded_vocab_size

_GATED = frozenset({"fast-swiglu", "swiglu", "geglu", "fast-geglu", "reglu", "fast-reglu"})


@dataclasses.dataclass(frozen=True)
class Stack:
    """One stack of identical transformer layers. Widths are per model, before tensor parallelism splits them."""

    name: str
    layers: int
    hidden: int
    ffn: int  # MLP width (per expert with MoE)
    heads: int
    query_groups: int  # key/value heads (GQA); = heads without it
    head_dim: int  # kv_channels
    tokens: int  # sequence positions one sample has in this stack
    gated: bool = False  # SwiGLU/GeGLU: the first MLP matrix is twice as wide
    norm_size: int = 2  # parameters per hidden unit of a norm: LayerNorm 2 (weight, bias), RMSNorm 1
    bias: bool = True
    experts: int = 1  # MoE experts per layer (1: a dense MLP)
    topk: int = 1  # experts each token visits
    cross_tokens: int = 0  # positions of the memory a cross-attention reads (T5 decoder, DiT text); 0: none
    cross_width: int = 0  # width of that memory (the key/value projections' input)
    extra_layer_params: int = 0  # per layer, outside attention and MLP (DiT's adaLN modulation)

    @property
    def query_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.query_groups * self.head_dim


@dataclasses.dataclass(frozen=True)
class ModelShape:
    kind: str  # gpt, bert, t5, vit, clip, dit, unet: names what was read, for messages
    stacks: tuple[Stack, ...]
    tokens_per_sample: int  # the throughput unit: tokens (text), patches (images) a sample counts for
    vocab: int = 0  # padded vocabulary (0: no token embedding)
    vocab_note: str = ""  # where the vocabulary size came from
    tied_output: bool = True  # the output layer reuses the embedding table
    output_tokens: int = 0  # positions per sample that produce logits over the vocabulary
    embedding_width: int = 0  # width of the token embedding
    extra_params: int = 0  # weights outside the stacks and the vocabulary: positions, patch embedding, heads, UNet
    extra_flops_per_sample: float = 0.0  # forward FLOPs outside the stacks' matmuls and the logits
    extra_activation_bytes_per_sample: float = 0.0  # activations outside the stacks (a UNet's feature maps)


def _positive(value, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _stack(name: str, section: Mapping[str, Any], tokens: int, layers_key: str = "num_layers", **extra) -> Stack:
    hidden = _positive(section.get("hidden_size"))
    heads = _positive(section.get("num_attention_heads"), 1)
    experts = _positive(section.get("num_moe_experts"), 1)
    dense_ffn = _positive(section.get("ffn_hidden_size"), 4 * hidden)
    return Stack(
        name=name,
        layers=_positive(section.get(layers_key)),
        hidden=hidden,
        ffn=_positive(section.get("moe_ffn_hidden_size"), dense_ffn) if experts > 1 else dense_ffn,
        heads=heads,
        query_groups=_positive(section.get("num_query_groups"), heads),
        head_dim=_positive(section.get("kv_channels"), hidden // heads),
        tokens=tokens,
        gated=str(section.get("activation", "gelu")) in _GATED,
        norm_size=1 if str(section.get("normalization", "layernorm")).lower() == "rmsnorm" else 2,
        bias=bool(section.get("bias", True)),
        experts=experts,
        topk=_positive(section.get("moe_router_topk"), 1) if experts > 1 else 1,
        **extra,
    )


def _learned_positions(section: Mapping[str, Any]) -> int:
    if section.get("position_embedding_type", "learned_absolute") != "learned_absolute":
        return 0
    return _positive(section.get("max_position_embeddings"), _positive(section.get("encoder_seq_length")))


def _gpt(model: Mapping[str, Any], tp: int) -> ModelShape:
    seq = _positive(model.get("encoder_seq_length"), _positive((model.get("data") or {}).get("seq_length"), 2048))
    stack = _stack("", model, seq)
    vocab, note = padded_vocab_size(model, tp)
    return ModelShape(
        kind="gpt",
        stacks=(stack,),
        tokens_per_sample=seq,
        vocab=vocab,
        vocab_note=note,
        tied_output=bool(model.get("share_embeddings_and_output_weights", True)),
        output_tokens=seq,
        embedding_width=stack.hidden,
        # learned positions, and the final norm
        extra_params=_learned_positions(model) * stack.hidden + stack.norm_size * stack.hidden,
    )


def _bert(model: Mapping[str, Any], tp: int) -> ModelShape:
    shape = _gpt(model, tp)
    h = shape.embedding_width
    # BERT's LM head transforms every position (dense h x h, GeLU, LayerNorm) before the output layer, which has a
    # bias over the vocabulary; the binary head's pooler (h x h) and classifier (h x 2) see one position a sample;
    # token types add a 2-row table.
    lm_head = h * h + h + 2 * h + shape.vocab
    binary_head = (h * h + h + 2 * h + 2) if model.get("bert_binary_head", True) else 0
    return dataclasses.replace(
        shape,
        kind="bert",
        extra_params=shape.extra_params + lm_head + binary_head + 2 * h,
        extra_flops_per_sample=2.0 * h * h * shape.output_tokens + 2.0 * binary_head,
    )


def _t5(model: Mapping[str, Any], tp: int) -> ModelShape:
    encoder_tokens = _positive(model.get("encoder_seq_length"), 512)
    decoder_tokens = _positive((model.get("data") or {}).get("seq_length_dec"), 128)
    encoder = _stack("encoder", model, encoder_tokens, "encoder_num_layers")
    decoder = _stack(
        "decoder", model, decoder_tokens, "decoder_num_layers", cross_tokens=encoder_tokens, cross_width=encoder.hidden
    )
    vocab, note = padded_vocab_size(model, tp)
    h = encoder.hidden
    relative = model.get("position_embedding_type") == "relative"
    positions = 2 * _positive(model.get("relative_attention_num_buckets"), 32) * encoder.heads if relative else 0
    return ModelShape(
        kind="t5",
        stacks=(encoder, decoder),
        tokens_per_sample=encoder_tokens,  # the seed's T5 tables count encoder tokens (global batch x 512)
        vocab=vocab,
        vocab_note=note,
        tied_output=bool(model.get("share_embeddings_and_output_weights", True)),
        output_tokens=decoder_tokens,
        embedding_width=h,
        # one learned position table for both stacks (or a relative bias table each), two final norms, and the
        # output layer's bias over the vocabulary
        extra_params=_learned_positions(model) * h + positions + 2 * encoder.norm_size * h + vocab,
    )


def _vision_tower(name: str, section: Mapping[str, Any]) -> tuple[Stack, int, float]:
    """The tower, its weights outside the stack (patch embedding, class tokens, a position per patch and class
    token, the final norm), and the patch embedding's forward FLOPs per image."""
    patch = _positive(section.get("patch_dim"), 16)
    height, width = _positive(section.get("img_h"), 224), _positive(section.get("img_w"), 224)
    class_tokens = _positive(section.get("class_token_length"), 1)
    tokens = (height // patch) * (width // patch) + class_tokens
    patch_inputs = patch * patch * _positive(section.get("num_channels"), 3)
    stack = _stack(name, section, tokens)
    h = stack.hidden
    params = patch_inputs * h + h + class_tokens * h + tokens * h + 2 * h
    return stack, params, 2.0 * patch_inputs * h * tokens


def _vit(model: Mapping[str, Any], tp: int) -> ModelShape:
    stack, params, flops = _vision_tower("", model)
    head = stack.hidden * _positive(model.get("num_classes"), 1000)
    return ModelShape(
        kind="vit",
        stacks=(stack,),
        tokens_per_sample=stack.tokens,
        extra_params=params + head + _positive(model.get("num_classes"), 1000),
        extra_flops_per_sample=flops + 2.0 * head,
    )


def _clip(model: Mapping[str, Any], tp: int) -> ModelShape:
    vision_section, text_section = model["vision"], model["text"]
    vision, vision_params, vision_flops = _vision_tower("vision tower", vision_section)
    text_tokens = _positive(text_section.get("encoder_seq_length"), 77)
    text = _stack("text tower", text_section, text_tokens)
    output = _positive(model.get("output_dim"), vision.hidden)
    vocab, note = padded_vocab_size(model, tp)
    projections = vision.hidden * output + text.hidden * output
    return ModelShape(
        kind="clip",
        stacks=(vision, text),
        tokens_per_sample=vision.tokens + text_tokens,
        vocab=vocab,
        vocab_note=note,
        output_tokens=0,  # CLIP's loss compares embeddings; no logits over the vocabulary
        embedding_width=text.hidden,
        extra_params=vision_params + _learned_positions(text_section) * text.hidden + 2 * text.hidden + projections + 1,
        extra_flops_per_sample=vision_flops + 2.0 * projections,
    )


def _dit(model: Mapping[str, Any], tp: int) -> ModelShape:
    data = model.get("data") or {}
    latent = list(data.get("latent_shape") or [4, 1, 32, 32])
    tokens = _positive(data.get("seq_length"), 256)
    spatial, temporal = _positive(model.get("patch_spatial"), 2), _positive(model.get("patch_temporal"), 1)
    hidden = _positive(model.get("hidden_size"))
    text_width = _positive(model.get("text_embedding_dim"), hidden)
    cross = bool(model.get("cross_attention", True))
    # adaLN-Zero: each layer turns the conditioning vector into 6 modulation vectors (shift, scale, gate for
    # attention and MLP), a (hidden x 6 hidden) linear layer (Peebles & Xie 2023, DiT).
    stack = _stack(
        "",
        model,
        tokens,
        cross_tokens=_positive(data.get("text_length"), 512) if cross else 0,
        cross_width=text_width if cross else 0,
        extra_layer_params=6 * hidden * hidden + 6 * hidden,
    )
    patch_inputs = _positive(latent[0], 4) * spatial * spatial * temporal
    # patch embedding in, final layer out (twice the channels when predicting variance), timestep MLP, positions
    params = 2 * patch_inputs * hidden + 2 * hidden + 256 * hidden + hidden * hidden + 2 * hidden + tokens * hidden
    return ModelShape(
        kind="dit",
        stacks=(stack,),
        tokens_per_sample=tokens,
        extra_params=params,
        extra_flops_per_sample=2.0 * 2 * patch_inputs * hidden * tokens,
    )


def _unet(model: Mapping[str, Any]) -> ModelShape:
    context = _positive((model.get("cond_stage_config") or {}).get("max_length"), 77)
    size = unet_size(model["unet_config"], context)
    return ModelShape(
        kind="unet",
        stacks=(),
        tokens_per_sample=size.latent_positions,
        extra_params=size.params,
        extra_flops_per_sample=size.forward_flops,
        extra_activation_bytes_per_sample=size.activation_bytes,
    )


def shape_of_model(model: Mapping[str, Any], tensor_parallel: int = 1) -> ModelShape | None:
    """The sizes of a training `model:` section, or None when it has no transformer or UNet to count."""
    vision, text = model.get("vision"), model.get("text")
    if isinstance(vision, Mapping) and isinstance(text, Mapping):
        shape = _clip(model, tensor_parallel)
    elif isinstance(model.get("unet_config"), Mapping):
        return _unet(model)
    elif "encoder_num_layers" in model:
        shape = _t5(model, tensor_parallel)
    elif isinstance((model.get("data") or {}).get("latent_shape"), (list, tuple)) or "patch_spatial" in model:
        shape = _dit(model, tensor_parallel)
    elif "img_h" in model or "patch_dim" in model:
        shape = _vit(model, tensor_parallel)
    elif "bert_binary_head" in model:
        shape = _bert(model, tensor_parallel)
    elif "num_layers" in model:
        shape = _gpt(model, tensor_parallel)
    else:
        return None
    if not shape.stacks or any(stack.layers == 0 or stack.hidden == 0 for stack in shape.stacks):
        return None
    return shape
