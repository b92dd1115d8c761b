"""Schemas of the Stable Diffusion family's framework inference (conf/fw_inference/{stable_diffusion,dreambooth,
instruct_pix2pix}/*.yaml), with the seed's keys, and the `infer:` and `trainer:` sections the FID/CLIP evaluation
shares with them.

    cfg = Text2ImgConfig.from_dict(section, "fw_inference")   # stable_diffusion/text2img, dreambooth/text2img
    cfg = EditConfig.from_dict(section, "fw_inference")       # instruct_pix2pix/edit_cli

One process each. text2img writes `<infer.out_path>/images/<prompt>_<image>.png` (and `grid_<prompt>.png` with
`infer.combine_images`) and `text2img.json`; edit_cli writes `<edit.outpath>/edit_<image>.png` (and `grid.png`)
and `edit.json`. With `class_reference_dir` (class folders of images, `<dir>/<class_name>/*.png`), text2img scores
each prompt's images by the nearest class-mean image.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, non_negative, positive_fields
from .common_training import Precision, precision_name
from .run import OneProcessRun, SavedModelStage

STAGE = "fw_inference"
TEXT2IMG_RESULTS = "text2img.json"
EDIT_RESULTS = "edit.json"
Sampler = Literal["PLMS", "DDIM", "DPM", "Euler"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class InferenceRun(OneProcessRun):
    """model_train_name: the training run whose .nemo is read by default."""

    one_process_fix = "framework inference runs in one process: set run.nodes and run.ntasks_per_node to 1"


@dataclasses.dataclass(frozen=True)
class InferenceTrainer:
    devices: int = 1  # GPUs of one process (the evaluation's generate step: per array task, one per process)
    num_nodes: int = 1
    accelerator: Literal["gpu", "cpu"] = "gpu"
    precision: Precision = 16  # 16 (fp16 autocast), bf16, or 32; match the training's
    logger: bool = False  # kept for the seed's key; inference logs no metrics

    def check(self, key: str) -> None:
        positive_fields(self, key, "devices", "num_nodes")
        if self.accelerator == "cpu" and self.precision_name() == "fp16":
            raise field_fault(self, key, "precision", "fp16 runs on GPUs only: use 32 or bf16 on the CPU")

    def precision_name(self) -> str:
        return precision_name(self.precision)


@dataclasses.dataclass(frozen=True)
class InferenceModel:
    restore_from_path: str  # the family's .nemo (or a training checkpoint folder: its newest complete step)
    precision: Precision | None = None  # the seed's echo of trainer.precision


@dataclasses.dataclass(frozen=True)
class InferSection:
    """The seed's `infer:` keys. Images are height x width pixels; the latents height / down_factor."""

    unconditional_guidance_scale: float | None = 7.5  # classifier-free guidance; 1 = the prompt alone
    num_images_per_prompt: int = 4  # images of one prompt, denoised as one batch
    height: int = 512
    width: int = 512
    down_factor: int = 8  # the VAE's image pixels per latent pixel; must match the model's VAE
    inference_steps: int = 50
    sampler_type: Sampler = "PLMS"
    eta: float = 0.0  # DDIM's noise (0 = deterministic); the other samplers take none
    output_type: Literal["pil"] = "pil"
    save_to_file: bool = True
    out_path: str | None = None  # where the images go
    seed: int = 123  # the starting noise of prompt p is drawn from (seed + p)
    prompts: list[str] = dataclasses.field(default_factory=list)
    batch_size: int = 1  # prompts denoised at once where there are many (the evaluation's captions)
    combine_images: list[int] | None = None  # [rows, cols]: also tile each prompt's images into one grid

    def check(self, key: str) -> None:
        positive_fields(
            self, key, "num_images_per_prompt", "height", "width", "down_factor", "inference_steps", "batch_size"
        )
        non_negative(f"{key}.eta", self.eta)
        if self.eta and self.sampler_type != "DDIM":
            raise field_fault(self, key, "eta", f"only DDIM adds noise by eta; set 0 for {self.sampler_type}")
        for name in ("height", "width"):
            if getattr(self, name) % self.down_factor:
                raise config_fault(
                    f"{key}.{name}", getattr(self, name), f"must be a multiple of down_factor ({self.down_factor})"
                )
        if self.unconditional_guidance_scale is not None:
            non_negative(f"{key}.unconditional_guidance_scale", self.unconditional_guidance_scale)
        check_grid(f"{key}.combine_images", self.combine_images, self.num_images_per_prompt, "num_images_per_prompt")


def check_grid(key: str, grid: list[int] | None, images: int, images_key: str) -> None:
    if grid is None:
        return
    if len(grid) != 2 or any(not isinstance(n, int) or n < 1 for n in grid):
        raise config_fault(key, grid, "give [rows, columns] of the grid, or null for no grid")
    if grid[0] * grid[1] != images:
        raise config_fault(
            key,
            grid,
            f"a {grid[0]}x{grid[1]} grid holds {grid[0] * grid[1]} images, but {images_key} "
            f"is {images}: make rows x columns equal it",
        )


@dataclasses.dataclass(frozen=True)
class Text2ImgConfig(SavedModelStage, stage=STAGE):
    run: InferenceRun
    infer: InferSection
    model: InferenceModel
    trainer: InferenceTrainer = InferenceTrainer()
    # Class folders (<dir>/<class>/*.png, e.g. data_preparation=vit/tiny_shape_folders' val/) to score the images
    # against: a prompt naming a class (folder name, underscores as spaces) is scored by the nearest class mean.
    class_reference_dir: str | None = None

    def check(self, key: str) -> None:
        if not self.infer.prompts:
            raise config_fault(f"{key}.infer.prompts", self.infer.prompts, "list at least one prompt")
        if self.infer.unconditional_guidance_scale is None:
            raise config_fault(f"{key}.infer.unconditional_guidance_scale", None, "set the guidance scale, e.g. 7.5")
        if not self.infer.save_to_file or not self.infer.out_path:
            raise config_fault(
                f"{key}.infer.save_to_file",
                self.infer.save_to_file,
                "text2img writes its images: set save_to_file true and out_path to a folder",
            )

    def input_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.class_reference_dir", self.class_reference_dir)] if self.class_reference_dir else []

    def writes(self) -> list[str]:
        return [self.infer.out_path]


@dataclasses.dataclass(frozen=True)
class EditSection:
    """InstructPix2Pix's `edit:` keys (the seed's edit_cli)."""

    input: str  # the image to edit
    outpath: str  # where the edits go
    resolution: int = 512  # the input's longer side is scaled to this (then cut to the model's size multiple)
    steps: int = 100  # Euler ancestral steps
    prompt: str = ""  # the edit instruction
    cfg_text: float = 7.5  # guidance towards the instruction
    cfg_image: float = 1.2  # guidance towards the input image
    num_images_per_prompt: int = 8
    combine_images: list[int] | None = dataclasses.field(default_factory=lambda: [2, 4])  # [rows, cols]; null: no grid
    seed: int = 1234

    def check(self, key: str) -> None:
        positive_fields(self, key, "resolution", "steps", "num_images_per_prompt")
        non_negative(f"{key}.cfg_text", self.cfg_text)
        non_negative(f"{key}.cfg_image", self.cfg_image)
        check_grid(f"{key}.combine_images", self.combine_images, self.num_images_per_prompt, "num_images_per_prompt")


@dataclasses.dataclass(frozen=True)
class EditConfig(SavedModelStage, stage=STAGE):
    run: InferenceRun
    edit: EditSection
    model: InferenceModel
    trainer: InferenceTrainer = InferenceTrainer()

    def check(self, key: str) -> None:
        if not self.edit.prompt.strip():
            raise config_fault(f"{key}.edit.prompt", self.edit.prompt, 'give the edit instruction, e.g. "make it blue"')

    def input_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.edit.input", self.edit.input)]

    def writes(self) -> list[str]:
        return [self.edit.outpath]


def torch_dtype_name(trainer: InferenceTrainer) -> str:
    """The torch dtype name inference runs in: float16, bfloat16 or float32."""
    return {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[trainer.precision_name()]


__all__ = [
    "EditConfig",
    "InferSection",
    "InferenceModel",
    "InferenceRun",
    "InferenceTrainer",
    "Text2ImgConfig",
    "check_grid",
    "torch_dtype_name",
]
