"""The exported graphs under onnxruntime, standing in for the networks of StableDiffusionParts, so the framework's
own sampling loop (sampling.py: text_to_images, edit_image) runs on them unchanged.

    parts = onnx_parts("<model_repo>/stable_diffusion/1")       # the graphs and SETTINGS_FILE of an export
    images = text_to_images(parts, ["a red circle"], Sampling(20, "DDIM"), 7.5, 4, 64, 64, generator)

Each graph has the fixed batch it was exported at. A call with a batch that divides it (the pipeline without
guidance sends half the UNet's batch) is repeated up to it and the first rows kept; any other batch is refused
with the exported size named.
"""

import json
import types
from pathlib import Path

import numpy as np
import torch

SETTINGS_FILE = "pipeline.json"  # what the export wrote beside the graphs: model section, sizes, served defaults


class _Session:
    def __init__(self, path: Path):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: its notes on unused initializers are not the user's concern
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.batch = self.session.get_inputs()[0].shape[0]
        self.name = path.name

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        rows = tensors[0].shape[0]
        if rows != self.batch:
            if self.batch % rows:
                raise ValueError(f"{self.name} was exported for batches of {self.batch}; got {rows}")
            tensors = [t.repeat(self.batch // rows, *([1] * (t.dim() - 1))) if t.dim() else t for t in tensors]
        feed = {name: t.detach().cpu().numpy() for name, t in zip(self.inputs, tensors)}
        (out,) = self.session.run(None, feed)
        return torch.from_numpy(out)[:rows]


class _Network:
    """What the sampling code asks of a diffusers network besides calling it: dtype, device, config."""

    dtype = torch.float32

    def __init__(self, config: dict):
        self.config = types.SimpleNamespace(**config)

    def parameters(self):
        yield torch.zeros(())  # the device the pipeline places its tensors on: the CPU onnxruntime reads from


class OnnxUnet(_Network):
    def __init__(self, session: _Session, config: dict):
        super().__init__(config)
        self.session = session

    def __call__(self, latents, timestep, encoder_hidden_states):
        timestep = torch.as_tensor(timestep, dtype=torch.float32).reshape(())
        return types.SimpleNamespace(sample=self.session(latents.float(), timestep, encoder_hidden_states.float()))


class OnnxVae(_Network):
    def __init__(self, decoder: _Session, encoder, config: dict):
        super().__init__(config)
        self.decoder, self.encoder = decoder, encoder

    def decode(self, latents):
        return types.SimpleNamespace(sample=self.decoder(latents.float()))

    def encode(self, images):
        if self.encoder is None:
            raise ValueError("this export has no VAE encoder graph (only InstructPix2Pix's has)")
        mode = self.encoder(images.float())
        return types.SimpleNamespace(latent_dist=types.SimpleNamespace(mode=lambda: mode))


class _OnnxStableDiffusion:
    """Mixed into StableDiffusionParts (imported lazily): the text encoder is the clip graph, which already computes
    the layer the model section names."""

    def encode_text(self, texts):
        return self.text_encoder(self.token_ids(texts))


def onnx_parts(folder):
    """StableDiffusionParts over the graphs in `folder` (<name>.onnx and SETTINGS_FILE)."""
    from ..multimodal.caption_tokenizer import load_clip_tokenizer
    from .model import StableDiffusionParts, model_section, noise_scheduler

    folder = Path(folder)
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    model = model_section(tokenizer_in(settings["model"], folder), "model")
    session = {name: _Session(folder / f"{name}.onnx") for name in ("unet", "vae", "clip")}
    encoder = _Session(folder / "vae_encoder.onnx") if (folder / "vae_encoder.onnx").is_file() else None
    parts_class = type("OnnxStableDiffusion", (_OnnxStableDiffusion, StableDiffusionParts), {})
    return parts_class(
        unet=OnnxUnet(session["unet"], settings["unet"]),
        vae=OnnxVae(session["vae"], encoder, settings["vae"]),
        text_encoder=session["clip"],
        tokenizer=load_clip_tokenizer(model.tokenizer),
        noise_scheduler=noise_scheduler(model),
        config=model,
    )


def tokenizer_in(section: dict, folder: Path) -> dict:
    """The stored model section with its tokenizer files named inside `folder`, where the export copied them."""
    tokenizer = dict(section["tokenizer"])
    for key in ("vocab_file", "merge_file"):
        if tokenizer.get(key):
            tokenizer[key] = str(folder / Path(tokenizer[key]).name)
    return {**section, "tokenizer": tokenizer}


def network_settings(parts) -> dict[str, dict]:
    """The config values of the real networks the sampling code reads, for SETTINGS_FILE."""
    return {
        "unet": {
            "in_channels": parts.unet.config.in_channels,
            "block_out_channels": list(parts.unet.config.block_out_channels),
        },
        "vae": {"block_out_channels": list(parts.vae.config.block_out_channels)},
    }


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """[N, 3, H, W] in [0, 1] -> [N, H, W, 3] uint8, what the served model answers."""
    return (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
