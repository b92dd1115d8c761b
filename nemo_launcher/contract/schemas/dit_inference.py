"""Schema of the resolved `fw_inference` section of the DiT family (conf/fw_inference/dit/*.yaml): a trained DiT
checkpoint denoises random latents into samples for each prompt, with a diffusers scheduler in a few steps.

    cfg = DitSampleConfig.from_dict(section, "fw_inference")

One process. Writes into `<output_dir>`: `<prompt number>_<image number>.png` where the latents are RGB images
(3 channels, one frame), `latents.pth` (every sample, [prompts, images, C, T, H, W]), and `samples.json` with the
prompts, settings and, with `reference_dir` (a labelled Energon dataset such as the generated shapes), how close each
prompt's samples are to the mean image of the prompt's class against the other classes' means.
"""

import dataclasses
from typing import Literal

from ..binding import StageSchema, field_fault, non_negative, positive_fields
from .run import OneProcessRun

STAGE = "fw_inference"
RESULTS_FILE = "samples.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DitSampleRun(OneProcessRun):
    """model_train_name: the training run whose checkpoint is sampled; sampling runs unsplit (TP = CP = 1)."""

    one_process_fix = "DiT sampling runs in one process: set nodes and ntasks_per_node to 1"


@dataclasses.dataclass(frozen=True)
class DitSampleConfig(StageSchema, stage=STAGE):
    run: DitSampleRun
    training_config: str  # the training run's resolved config (<run.name>_hydra.yaml): architecture and schedule
    checkpoint_dir: str  # the training run's checkpoints; the newest complete step-<N> is sampled
    prompts: list[str]
    output_dir: str
    text_encoder: Literal["word_table"] = "word_table"  # the generated data's stand-in for T5 (no model downloads here)
    num_images_per_prompt: int = 4
    inference_steps: int = 25  # denoising steps of the sampler
    sampler: Literal["ddim", "ddpm", "euler", "dpm_solver"] = "ddim"
    guidance_scale: float = 1.0  # classifier-free guidance; 1.0 = the prompt alone (no unconditional pass)
    seed: int = 123
    accelerator: Literal["cpu", "gpu"] = "gpu"
    reference_dir: str | None = None  # labelled Energon dataset to score the samples against (optional)

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_images_per_prompt", "inference_steps")
        non_negative(f"{key}.guidance_scale", self.guidance_scale)
        if not self.prompts:
            raise field_fault(self, key, "prompts", "give at least one prompt")

    def reads(self) -> list[tuple[str, str]]:
        paths = [(f"{STAGE}.training_config", self.training_config), (f"{STAGE}.checkpoint_dir", self.checkpoint_dir)]
        if self.reference_dir:
            paths.append((f"{STAGE}.reference_dir", f"{self.reference_dir}/.nv-meta/dataset.yaml"))
        return paths

    def writes(self) -> list[str]:
        return [self.output_dir]
