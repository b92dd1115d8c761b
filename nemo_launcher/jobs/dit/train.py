"""The DiT training job: `python3 -m nemo_launcher.jobs.dit.train --config <resolved training yaml>`.

Trains to trainer.max_steps on mock latents or an Energon dataset, writing TensorBoard events and checkpoints under
exp_manager.explicit_log_dir; a rerun continues from the newest complete checkpoint, the Energon loader where it
stopped. Signals, max_time, self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""

import sys

from ...contract.schemas.dit_training import DitTrainingConfig
from ..vision.entry import image_training_main

main = image_training_main(__package__, DitTrainingConfig, "dit_recipe", "build_dit_parts", "DitModule")

if __name__ == "__main__":
    sys.exit(main())
