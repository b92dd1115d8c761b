"""Stable Diffusion's frozen encoders for precache_encodings (conf/_precache/precache_sd.yaml, tiny_sd.yaml): the
same networks training builds from its first_stage_config and cond_stage_config, so precached and on-the-fly data
give the UNet the same inputs.

    VaeMomentsEncoder(resolution=256, first_stage_config={...}).encode([pil_image])   # [b, 2 x embed_dim, h, w]
    TextContextEncoder(cond_stage_config={...}, tokenizer={"library": "byte"}).encode(["a red circle"])

The image encoding is the posterior's parameters (mean and log-variance), not one sample: training draws a new
latent from them at every step, as it would encoding on the fly.
"""

from typing import Any

import torch

from ...contract.schemas.clip_training import ClipTokenizer
from ...contract.schemas.stable_diffusion_model import CondStageConfig, FirstStageConfig
from ..common.config import bind
from .data import image_pixels
from .model import build_text_encoder, build_vae, text_context


class VaeMomentsEncoder:
    def __init__(self, resolution: int, first_stage_config: dict[str, Any]):
        first = bind(FirstStageConfig, first_stage_config, "encoder_config.first_stage_config")
        self.vae, self.resolution = build_vae(first, 1.0), resolution

    @torch.no_grad()
    def encode(self, images: list) -> torch.Tensor:
        pixels = torch.stack([torch.from_numpy(image_pixels(image, self.resolution)) for image in images])
        return self.vae.encode(pixels).latent_dist.parameters


class TextContextEncoder:
    def __init__(self, cond_stage_config: dict[str, Any], tokenizer: dict[str, Any]):
        from ..multimodal.caption_tokenizer import load_clip_tokenizer

        self.text = bind(CondStageConfig, cond_stage_config, "encoder_config.cond_stage_config")
        self.tokenizer = load_clip_tokenizer(bind(ClipTokenizer, tokenizer, "encoder_config.tokenizer"))
        self.encoder = build_text_encoder(self.text, self.tokenizer).eval()

    @torch.no_grad()
    def encode(self, texts: list[str]) -> torch.Tensor:
        ids = torch.tensor([self.tokenizer.encode(text, self.text.max_length) for text in texts], dtype=torch.long)
        return text_context(self.encoder, ids, self.text.layer)
