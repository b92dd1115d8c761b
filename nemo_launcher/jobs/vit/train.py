"""The ViT training job: `python3 -m nemo_launcher.jobs.vit.train --config <resolved training yaml>`.

Trains the classifier to trainer.max_steps on ImageNet's class-folder layout, writing TensorBoard events and
checkpoints under exp_manager.explicit_log_dir; a rerun continues from the newest complete checkpoint at the next
unseen image. Signals, max_time, self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""

import sys

from ...contract.schemas.vit_training import VitTrainingConfig
from ..vision.entry import image_training_main

main = image_training_main(__package__, VitTrainingConfig, "vit_recipe", "build_vit_parts", "VitModule")

if __name__ == "__main__":
    sys.exit(main())
