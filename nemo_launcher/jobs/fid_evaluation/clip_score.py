"""CLIP score: the cosine similarity of an image's and its caption's CLIP embeddings, averaged over pairs.

    scorer = ClipScorer("/models/clip-vit-large-patch14")   # a transformers CLIPModel folder; nothing downloads
    scorer.similarities(images, captions)                     # [n] cosines, each in [-1, 1]

The folder holds what `CLIPModel.save_pretrained`, the tokenizer's and the image processor's `save_pretrained`
write (Hugging Face's openai/clip-vit-large-patch14 is such a folder). The score is the raw cosine, as the MLPerf
target `CLIP >= 0.15` reads it (no x100 or x2.5 rescaling, no clipping at 0).
"""

import os

import numpy as np


class ClipScorer:
    def __init__(self, model_path: str, device="cpu"):
        from transformers import AutoImageProcessor, CLIPModel, CLIPTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a per-tensor loading bar is noise in a job log
        if not os.path.isfile(os.path.join(model_path, "config.json")):
            raise FileNotFoundError(os.path.join(model_path, "config.json"))
        self.model = CLIPModel.from_pretrained(model_path).eval().to(device)
        self.tokenizer = CLIPTokenizer.from_pretrained(model_path)
        self.processor = AutoImageProcessor.from_pretrained(model_path)
        self.device = device
        self.max_length = self.model.config.text_config.max_position_embeddings

    def similarities(self, images: list, captions: list[str], batch_size: int = 32) -> np.ndarray:
        import torch

        if len(images) != len(captions):
            raise ValueError(f"{len(images)} images but {len(captions)} captions")
        scores = []
        for start in range(0, len(images), batch_size):
            texts = self.tokenizer(
                captions[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            pixels = self.processor(
                images=[image.convert("RGB") for image in images[start : start + batch_size]], return_tensors="pt"
            )["pixel_values"]
            with torch.no_grad():
                out = self.model(
                    input_ids=texts["input_ids"].to(self.device),
                    attention_mask=texts["attention_mask"].to(self.device),
                    pixel_values=pixels.to(self.device),
                )
            image_embeds = torch.nn.functional.normalize(out.image_embeds.double(), dim=-1)
            text_embeds = torch.nn.functional.normalize(out.text_embeds.double(), dim=-1)
            scores.append((image_embeds * text_embeds).sum(-1).cpu().numpy())
        return np.concatenate(scores) if scores else np.zeros(0)
