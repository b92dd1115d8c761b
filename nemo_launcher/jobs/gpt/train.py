"""GPT pre-training: megatron-core model, PyTorch Lightning loop (the trainer core, with the GPT recipe).

    python3 -u -m nemo_launcher.jobs.gpt.train --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.train --config ...     (several processes here)
    srun python3 -u -m nemo_launcher.jobs.gpt.train --config ...                  (Slurm)

What it reads and writes, resuming, stop signals and exit codes (0, 2, 74, 75): core/program.py.

Only the standard library and the contract are imported at module level: dist_checkpointing starts a helper
process by spawning, which re-imports this module; it must not pay for torch and megatron a second time.
"""

import sys

from ...contract.schemas.gpt_training import TrainingConfig
from ..core.entry import training_main

main = training_main(
    "python3 -m nemo_launcher.jobs.gpt.train", TrainingConfig, f"{__package__}.recipe", recipe="gpt_recipe"
)

if __name__ == "__main__":
    sys.exit(main())
