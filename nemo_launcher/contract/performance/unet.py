"""A latent-diffusion UNet (Stable Diffusion's `model.unet_config`) counted block by block: weights, forward
FLOPs and stored activations per sample.

    size = unet_size(model["unet_config"], context_tokens=77)   # UnetSize(params=859520964, ...)

The walk follows the LDM UNet the seed's Stable Diffusion trains (CompVis latent-diffusion, openaimodel.py's
UNetModel as NeMo ships it): a time-embedding MLP, input blocks of ResBlocks with SpatialTransformers at the listed
attention resolutions and a strided convolution between levels, a middle ResBlock-transformer-ResBlock, output
blocks that concatenate the skip connections, and an output convolution. SD 1.x's UNet has 859,520,964 weights
(the diffusers UNet2DConditionModel of CompVis/stable-diffusion-v1-4), which tests/contract pin.
The frozen VAE and text encoder are not trained and only run forward; they are left out of weights and FLOPs.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass
class UnetSize:
    params: int = 0
    forward_flops: float = 0.0  # per sample
    activation_bytes: float = 0.0  # per sample, 16-bit activations kept for the backward pass
    latent_positions: int = 0  # pixels of the latent image, the throughput unit


def _conv(size: UnetSize, c_in: int, c_out: int, kernel: int, positions: int) -> None:
    size.params += c_in * c_out * kernel * kernel + c_out
    size.forward_flops += 2.0 * c_in * c_out * kernel * kernel * positions


def _linear(size: UnetSize, c_in: int, c_out: int, tokens: int, bias: bool = True) -> None:
    size.params += c_in * c_out + (c_out if bias else 0)
    size.forward_flops += 2.0 * c_in * c_out * tokens


def _res_block(size: UnetSize, c_in: int, c_out: int, embed: int, positions: int) -> None:
    size.params += 2 * c_in + 2 * c_out  # two GroupNorms
    _conv(size, c_in, c_out, 3, positions)
    _linear(size, embed, c_out, 1)  # the time embedding projected onto the channels
    _conv(size, c_out, c_out, 3, positions)
    if c_in != c_out:
        _conv(size, c_in, c_out, 1, positions)
    # GroupNorm and SiLU inputs of both convolutions, the convolutions' inputs, the residual
    size.activation_bytes += 2.0 * positions * (3 * c_in + 4 * c_out)


def _transformer(size: UnetSize, channels: int, depth: int, context: tuple[int, int], n: int) -> None:
    """A SpatialTransformer over n positions; its head count splits the channels and changes no count."""
    context_tokens, context_dim = context
    size.params += 2 * channels  # GroupNorm
    _linear(size, channels, channels, n)  # proj_in (1x1 convolution or linear: the same count)
    for _ in range(depth):
        size.params += 3 * 2 * channels  # three LayerNorms
        _linear(size, channels, 3 * channels, n, bias=False)  # self-attention q, k, v
        _linear(size, channels, channels, n)
        _linear(size, channels, channels, n, bias=False)  # cross-attention q from the image
        _linear(size, context_dim, 2 * channels, context_tokens, bias=False)  # k, v from the text
        _linear(size, channels, channels, n)
        _linear(size, channels, 8 * channels, n)  # GEGLU: two 4c halves
        _linear(size, 4 * channels, channels, n)
        # attention scores and weighted sums (self over n positions, cross over the text tokens)
        size.forward_flops += 4.0 * n * n * channels + 4.0 * n * context_tokens * channels
        # Korthikanti et al.'s per-layer activations with a flash-attention core and a GEGLU MLP twice as wide
        size.activation_bytes += 2.0 * n * channels * (17 + 12) + 2.0 * context_tokens * context_dim
    _linear(size, channels, channels, n)  # proj_out
    size.activation_bytes += 2.0 * n * channels * 2


def unet_size(unet: Mapping[str, Any], context_tokens: int = 77) -> UnetSize:
    base = int(unet.get("model_channels") or 320)
    mults = list(unet.get("channel_mult") or [1, 2, 4, 4])
    attention_at = set(unet.get("attention_resolutions") or [])
    blocks = int(unet.get("num_res_blocks") or 2)
    depth, context_dim = int(unet.get("transformer_depth") or 1), int(unet.get("context_dim") or 768)
    side = int(unet.get("image_size") or 32)
    embed = 4 * base
    size = UnetSize(latent_positions=side * side)

    def attend(channels: int, factor: int) -> None:
        if factor in attention_at:
            positions = (side // factor) ** 2
            _transformer(size, channels, depth, (context_tokens, context_dim), positions)

    _linear(size, base, embed, 1)
    _linear(size, embed, embed, 1)
    _conv(size, int(unet.get("in_channels") or 4), base, 3, side * side)
    skips, channels, factor = [base], base, 1
    for level, mult in enumerate(mults):
        for _ in range(blocks):
            _res_block(size, channels, mult * base, embed, (side // factor) ** 2)
            channels = mult * base
            attend(channels, factor)
            skips.append(channels)
        if level != len(mults) - 1:
            factor *= 2
            _conv(size, channels, channels, 3, (side // factor) ** 2)  # strided: counted at the output size
            skips.append(channels)
    _res_block(size, channels, channels, embed, (side // factor) ** 2)
    if attention_at:  # the middle block always attends when the UNet has attention anywhere
        middle = (side // factor) ** 2
        _transformer(size, channels, depth, (context_tokens, context_dim), middle)
    _res_block(size, channels, channels, embed, (side // factor) ** 2)
    for level, mult in reversed(list(enumerate(mults))):
        for block in range(blocks + 1):
            _res_block(size, channels + skips.pop(), mult * base, embed, (side // factor) ** 2)
            channels = mult * base
            attend(channels, factor)
            if level and block == blocks:
                factor //= 2
                _conv(size, channels, channels, 3, (side // factor) ** 2)  # after a nearest-neighbour upsample
    size.params += 2 * channels  # the output GroupNorm
    _conv(size, channels, int(unet.get("out_channels") or 4), 3, side * side)
    return size
