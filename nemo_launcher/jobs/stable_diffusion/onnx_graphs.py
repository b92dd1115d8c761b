"""Stable Diffusion's networks as ONNX graphs of fixed shapes, as the seed's export makes them (the batch is
num_images_per_prompt; engines built from them serve that batch only).

    graphs = pipeline_graphs(parts, images=4, latent_size=(64, 64), edit=False)
    export_fixed(graph, "/out/onnx/unet.onnx")
    worst = check_graph(graph, "/out/onnx/unet.onnx", [graph.batch])      # jobs/vision/onnx_graphs.py

| graph       | inputs                                                   | output                            |
|-------------|----------------------------------------------------------|-----------------------------------|
| clip        | input_ids [B, max_length] int64                          | context [B, max_length, width]    |
| unet        | latents [G x B, C_in, h, w], timestep [] float, context  | noise [G x B, C, h, w]            |
| vae         | latents [B, C, h, w] (unscaled)                          | images [B, 3, H, W]               |
| vae_encoder | images [1, 3, H, W] in [-1, 1] (InstructPix2Pix only)    | latents [1, C, h, w] (mode)       |

G is 2 for text to image (each prompt beside the empty prompt, for classifier-free guidance) and 3 for
InstructPix2Pix (text and image, image alone, neither). Each graph computes exactly the library call the framework
pipeline (sampling.py) makes, so the pipeline runs unchanged on either (onnx_parts.py).
"""

import dataclasses
import warnings

import torch

from ..vision.onnx_graphs import OPSET, Graph
from .model import text_context

# Graph name (the file stem of <name>.onnx and <name>.plan) -> what it is, in the seed's order of the engines.
GRAPH_FILES = {"vae": "VAE decoder", "unet": "UNet", "clip": "CLIP text encoder", "vae_encoder": "VAE encoder"}


class _TextEncoder(torch.nn.Module):
    def __init__(self, text_encoder, layer: str):
        super().__init__()
        self.text_encoder, self.layer = text_encoder, layer

    def forward(self, input_ids):
        return text_context(self.text_encoder, input_ids, self.layer)


class _Unet(torch.nn.Module):
    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(self, latents, timestep, context):
        return self.unet(latents, timestep, encoder_hidden_states=context).sample


class _VaeDecoder(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latents):
        return self.vae.decode(latents).sample


class _VaeEncoder(_VaeDecoder):
    def forward(self, images):
        return self.vae.encode(images).latent_dist.mode()


@dataclasses.dataclass(frozen=True)
class FixedGraph(Graph):
    batch: int = 1  # the one batch size the graph is exported, checked and served at


def _normal(*shape):
    return lambda batch, generator: torch.randn(batch, *shape, generator=generator)


def _token_ids(length: int, vocab: int):
    return lambda batch, generator: torch.randint(0, vocab, (batch, length), generator=generator)


def _timestep(steps: int):
    return lambda batch, generator: torch.randint(0, steps, (), generator=generator).float()


def pipeline_graphs(parts, images: int, latent_size: tuple[int, int], edit: bool) -> list[FixedGraph]:
    """The graphs of a text-to-image (edit false) or InstructPix2Pix pipeline denoising `images` latents of
    latent_size = (h, w) at once."""
    model = parts.config
    h, w = latent_size
    length, width = model.cond_stage_config.max_length, model.unet_config.context_dim
    guided = 3 if edit else 2
    in_channels = parts.unet.config.in_channels
    factor = 2 ** (len(parts.vae.config.block_out_channels) - 1)
    unet_inputs = {
        "latents": _normal(in_channels, h, w),
        "timestep": _timestep(model.timesteps),
        "context": _normal(length, width),
    }
    graphs = [
        FixedGraph("vae", _VaeDecoder(parts.vae).eval(), {"latents": _normal(model.channels, h, w)}, "images", images),
        FixedGraph("unet", _Unet(parts.unet).eval(), unet_inputs, "noise", guided * images),
        FixedGraph(
            "clip",
            _TextEncoder(parts.text_encoder, model.cond_stage_config.layer).eval(),
            {"input_ids": _token_ids(length, parts.tokenizer.vocab_size)},
            "context",
            images,
        ),
    ]
    if edit:
        graphs.append(
            FixedGraph(
                "vae_encoder",
                _VaeEncoder(parts.vae).eval(),
                {"images": _normal(3, h * factor, w * factor)},
                "latents",
                1,
            )
        )
    return graphs


def export_fixed(graph: FixedGraph, path: str) -> None:
    """torch.onnx.export (TorchScript tracing) at the graph's batch; every dimension stays fixed."""
    generator = torch.Generator().manual_seed(0)
    example = tuple(make(graph.batch, generator) for make in graph.inputs.values())
    with warnings.catch_warnings(), torch.no_grad():
        # diffusers' blocks branch on tensor sizes in Python; the trace keeps the branch of the fixed shapes, which
        # are the only ones the graph is ever run at (checked right after). The legacy-exporter notice: the dynamo
        # exporter needs onnxscript, which is not installed.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning)
        warnings.filterwarnings("ignore", "The feature will be removed", DeprecationWarning)
        torch.onnx.export(
            graph.module,
            example,
            path,
            input_names=list(graph.inputs),
            output_names=[graph.output],
            opset_version=OPSET,
            dynamo=False,
        )
