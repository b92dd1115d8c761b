"""Frozen encoders for precache_encodings: CLIP's image and text towers from `transformers`.

    encoder = ClipTextEncoder(pretrained="/models/clip-vit-large-patch14")   # a local folder, transformers format
    hidden, mask = encoder.encode(["a red circle", "a blue square"])         # (2, 77, 768), (2, 77)
    ClipImageEncoder(image_size=32, patch_size=8, hidden_size=32, ..., seed=0).encode([pil_image])
    # -> (1, projection_dim)

With `pretrained` the weights (and the text tokenizer) come from that folder; nothing is downloaded. Without it the
tower is built from the remaining arguments (transformers' CLIPVisionConfig / CLIPTextConfig keys) and initialised
from `seed`, and text is tokenised as UTF-8 bytes: the tiny pipeline's deterministic stand-in for real weights.
"""

import os

from ..common.errors import DataPrepError

# CLIP's pixel statistics (the mean and deviation its image towers were trained with).
_MEAN = (0.48145466, 0.4578275, 0.40821073)
_STD = (0.26862954, 0.26130258, 0.27577711)
# Byte tokens: 0 pads, 1 starts, 2 ends, byte b is b + 3.
_PAD, _BOS, _EOS, _BYTE_OFFSET = 0, 1, 2, 3


def _device():
    import torch

    if torch.cuda.is_available():
        return torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))) % torch.cuda.device_count()
        )
    return torch.device("cpu")


def _pretrained(path: str | None) -> str | None:
    if path is not None and not os.path.isfile(os.path.join(path, "config.json")):
        raise DataPrepError(
            f"precache spec: encoder_config.pretrained={path!r} is not a transformers model folder (no "
            f"config.json); save the CLIP model there with save_pretrained, or give the tower's sizes instead"
        )
    return path


class ClipImageEncoder:
    def __init__(self, pretrained: str | None = None, output: str = "image_embeds", seed: int = 0, **config):
        import torch
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

        if output not in ("image_embeds", "last_hidden_state"):
            raise DataPrepError(
                f"precache spec: encoder_config.output={output!r}: choose image_embeds or last_hidden_state"
            )
        if _pretrained(pretrained):
            self.model = CLIPVisionModelWithProjection.from_pretrained(pretrained)
        else:
            torch.manual_seed(seed)
            self.model = CLIPVisionModelWithProjection(CLIPVisionConfig(**config))
        self.device = _device()
        self.model.eval().to(self.device)
        self.size = self.model.config.image_size
        self.output = output

    def pixels(self, images):
        """Shorter side to the tower's size, centre crop, CLIP normalisation: (batch, 3, size, size)."""
        import numpy as np
        import torch
        from PIL import Image

        arrays = []
        for image in images:
            image = image.convert("RGB")
            scale = self.size / min(image.size)
            image = image.resize(
                (max(self.size, round(image.size[0] * scale)), max(self.size, round(image.size[1] * scale))),
                Image.BICUBIC,
            )
            left, top = (image.size[0] - self.size) // 2, (image.size[1] - self.size) // 2
            array = np.asarray(image.crop((left, top, left + self.size, top + self.size)), dtype=np.float32) / 255.0
            arrays.append((array - np.array(_MEAN, dtype=np.float32)) / np.array(_STD, dtype=np.float32))
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()

    def encode(self, images: list):
        import torch

        with torch.no_grad():
            out = self.model(pixel_values=self.pixels(images).to(self.device))
        return getattr(out, self.output)


class ClipTextEncoder:
    def __init__(
        self,
        pretrained: str | None = None,
        max_length: int = 77,
        output: str = "last_hidden_state",
        seed: int = 0,
        **config,
    ):
        import torch
        from transformers import CLIPTextConfig, CLIPTextModelWithProjection

        if output not in ("last_hidden_state", "text_embeds"):
            raise DataPrepError(
                f"precache spec: encoder_config.output={output!r}: choose last_hidden_state or text_embeds"
            )
        self.max_length, self.output = max_length, output
        if _pretrained(pretrained):
            from transformers import CLIPTokenizer

            self.tokenizer = CLIPTokenizer.from_pretrained(pretrained)
            self.model = CLIPTextModelWithProjection.from_pretrained(pretrained)
        else:
            self.tokenizer = None
            torch.manual_seed(seed)
            config = {
                "vocab_size": 256 + _BYTE_OFFSET,
                "max_position_embeddings": max_length,
                "pad_token_id": _PAD,
                "bos_token_id": _BOS,
                "eos_token_id": _EOS,
                **config,
            }
            self.model = CLIPTextModelWithProjection(CLIPTextConfig(**config))
        self.device = _device()
        self.model.eval().to(self.device)

    def tokens(self, texts: list[str]):
        """(input ids, attention mask), both (batch, max_length)."""
        import torch

        if self.tokenizer is not None:
            batch = self.tokenizer(
                texts, padding="max_length", truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            return batch["input_ids"], batch["attention_mask"]
        ids = torch.full((len(texts), self.max_length), _PAD, dtype=torch.long)
        for row, text in enumerate(texts):
            body = [byte + _BYTE_OFFSET for byte in text.encode("utf-8")][: self.max_length - 2]
            sequence = [_BOS, *body, _EOS]
            ids[row, : len(sequence)] = torch.tensor(sequence)
        return ids, (ids != _PAD).long()

    def encode(self, texts: list[str]):
        import torch

        ids, mask = self.tokens(texts)
        with torch.no_grad():
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
        return getattr(out, self.output), mask
