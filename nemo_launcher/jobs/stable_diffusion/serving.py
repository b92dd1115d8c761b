"""The exported Stable Diffusion pipelines as served models: shared by the Triton Python backend the export writes
(triton_model.py) and by a PyTriton server, so both answer a request with the same code.

    server = DiffusionServer.load("<model_repo>/stable_diffusion/1")
    server.answer({"prompt": np.array([b"a red circle"], dtype=object), "seed": np.array([7])})
    -> {"images": uint8 [num_images_per_prompt, H, W, 3]}

The seed's query inputs; any left out takes the export-time value saved in SETTINGS_FILE:
| model            | tensor                       | type   | dims       | meaning                                   |
|------------------|------------------------------|--------|------------|-------------------------------------------|
| stable_diffusion | prompt                       | STRING | [1]        | the text to draw                          |
|                  | seed                         | INT64  | [1], opt.  | the starting noise                        |
|                  | unconditional_guidance_scale | FP32   | [1], opt.  | classifier-free guidance                  |
|                  | inference_steps              | INT32  | [1], opt.  | denoising steps                           |
|                  | eta                          | FP32   | [1], opt.  | DDIM's noise (export's sampler DDIM only) |
| instruct_pix2pix | image                        | UINT8  | [-1,-1, 3] | the image to edit (scaled to the export's)|
|                  | prompt                       | STRING | [1]        | the edit instruction                      |
|                  | seed, steps                  | INT64, INT32 | [1], opt. |                                     |
|                  | text_cfg_scale, image_cfg_scale | FP32 | [1], opt. | guidance towards instruction / image    |
| both             | images (output)              | UINT8  | [N, H, W, 3] | N = num_images_per_prompt               |
"""

import json
from pathlib import Path

import numpy as np

from ..serving.text import TensorSpec
from .onnx_parts import SETTINGS_FILE

TEXT2IMG_INPUTS = (
    TensorSpec("prompt", "TYPE_STRING", (1,)),
    TensorSpec("seed", "TYPE_INT64", (1,), optional=True),
    TensorSpec("unconditional_guidance_scale", "TYPE_FP32", (1,), optional=True),
    TensorSpec("inference_steps", "TYPE_INT32", (1,), optional=True),
    TensorSpec("eta", "TYPE_FP32", (1,), optional=True),
)
EDIT_INPUTS = (
    TensorSpec("image", "TYPE_UINT8", (-1, -1, 3)),
    TensorSpec("prompt", "TYPE_STRING", (1,)),
    TensorSpec("seed", "TYPE_INT64", (1,), optional=True),
    TensorSpec("steps", "TYPE_INT32", (1,), optional=True),
    TensorSpec("text_cfg_scale", "TYPE_FP32", (1,), optional=True),
    TensorSpec("image_cfg_scale", "TYPE_FP32", (1,), optional=True),
)
NUMPY_TYPES = {
    "TYPE_STRING": np.object_,
    "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32,
    "TYPE_FP32": np.float32,
    "TYPE_UINT8": np.uint8,
}


def output_spec(images: int, height: int, width: int) -> TensorSpec:
    return TensorSpec("images", "TYPE_UINT8", (images, height, width, 3))


def _scalar(inputs: dict, name: str, default, kind):
    value = inputs.get(name)
    return default if value is None else kind(np.asarray(value).reshape(-1)[0])


def _text(inputs: dict, name: str) -> str:
    value = inputs.get(name)
    if value is None:
        raise ValueError(f"the request has no {name!r} input")
    item = np.asarray(value, dtype=object).reshape(-1)[0]
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


class DiffusionServer:
    def __init__(self, parts, settings: dict):
        self.parts = parts
        self.settings = settings  # SETTINGS_FILE: the task, image size and the served defaults

    @classmethod
    def load(cls, folder) -> "DiffusionServer":
        from .onnx_parts import onnx_parts

        return cls(onnx_parts(folder), json.loads((Path(folder) / SETTINGS_FILE).read_text()))

    @property
    def inputs(self):
        return EDIT_INPUTS if self.settings["task"] == "edit" else TEXT2IMG_INPUTS

    @property
    def outputs(self):
        s = self.settings
        return (output_spec(s["num_images_per_prompt"], s["height"], s["width"]),)

    def answer(self, inputs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        """One request's images; a ValueError names what is wrong with the request."""
        import torch

        from .onnx_parts import to_uint8
        from .sampling import Sampling, edit_image, image_to_pixels, text_to_images

        s, defaults = self.settings, self.settings["defaults"]
        prompt = _text(inputs, "prompt")
        generator = torch.Generator().manual_seed(_scalar(inputs, "seed", defaults["seed"], int))
        if s["task"] == "edit":
            from PIL import Image

            image = np.asarray(inputs.get("image") if inputs.get("image") is not None else [], dtype=np.uint8)
            if image.ndim != 3 or image.shape[-1] != 3:
                raise ValueError(f"image: expected an [H, W, 3] uint8 array, got shape {image.shape}")
            resized = Image.fromarray(image).convert("RGB").resize((s["width"], s["height"]), Image.LANCZOS)
            images = edit_image(
                self.parts,
                image_to_pixels(resized),
                prompt,
                steps=_positive(_scalar(inputs, "steps", defaults["steps"], int), "steps"),
                cfg_text=_scalar(inputs, "text_cfg_scale", defaults["cfg_text"], float),
                cfg_image=_scalar(inputs, "image_cfg_scale", defaults["cfg_image"], float),
                images=s["num_images_per_prompt"],
                generator=generator,
            )
        else:
            eta = _scalar(inputs, "eta", defaults["eta"], float)
            if eta and defaults["sampler_type"] != "DDIM":
                raise ValueError(
                    f"eta={eta}: only DDIM adds noise by eta; this model samples with {defaults['sampler_type']}"
                )
            sampling = Sampling(
                _positive(_scalar(inputs, "inference_steps", defaults["inference_steps"], int), "inference_steps"),
                defaults["sampler_type"],
                eta,
            )
            images = text_to_images(
                self.parts,
                [prompt],
                sampling,
                _scalar(inputs, "unconditional_guidance_scale", defaults["unconditional_guidance_scale"], float),
                s["num_images_per_prompt"],
                s["height"],
                s["width"],
                generator,
            )
        return {"images": to_uint8(images)}


def _positive(value: int, name: str) -> int:
    if value < 1:
        raise ValueError(f"{name}={value}: must be at least 1")
    return value
