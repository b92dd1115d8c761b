"""The Stable Diffusion training job: `python3 -m nemo_launcher.jobs.stable_diffusion.train --config <resolved yaml>`.

Trains the UNet to trainer.max_steps on WebDataset shards (precached latents and text embeddings, or images and
captions), writing TensorBoard events and checkpoints under exp_manager.explicit_log_dir and, at the end,
checkpoints/nemo_stable_diffusion.nemo; a rerun continues from the newest complete checkpoint. Signals, max_time,
self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""

import sys

from ...contract.schemas.stable_diffusion_training import StableDiffusionTrainingConfig
from ..vision.entry import image_training_main

main = image_training_main(__package__, StableDiffusionTrainingConfig, "sd_recipe", "build_sd_parts", "SdModule")

if __name__ == "__main__":
    sys.exit(main())
