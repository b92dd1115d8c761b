"""The CLIP training job: `python3 -m nemo_launcher.jobs.clip.train --config <resolved training yaml>`.

Trains to trainer.max_steps on image-caption WebDataset shards, writing TensorBoard events and checkpoints (with
the EMA weights when exp_manager.ema.enable) under exp_manager.explicit_log_dir; a rerun continues from the newest
complete checkpoint at the next unseen example. Signals, max_time, self-requeue, exit codes: the trainer core's
(nemo_launcher/jobs/core/program.py).
"""

import sys

from ...contract.schemas.clip_training import ClipTrainingConfig
from ..vision.entry import image_training_main

main = image_training_main(__package__, ClipTrainingConfig, "clip_recipe", "build_clip_parts", "ClipModule")

if __name__ == "__main__":
    sys.exit(main())
