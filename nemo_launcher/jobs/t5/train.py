"""T5 and mT5 pre-training: megatron-core T5Model, PyTorch Lightning loop (the trainer core, with the T5 recipe).

    python3 -u -m nemo_launcher.jobs.t5.train --config <job dir>/<run.name>_hydra.yaml
    (torchrun, srun: as gpt/train.py)

mT5 is the same program: its configs name a SentencePiece tokenizer instead of T5's WordPiece vocab.txt.
What it reads and writes, resuming, stop signals and exit codes (0, 2, 74, 75): core/program.py.

Nothing heavy is imported at module level (core/entry.py says why).
"""

import sys

from ...contract.schemas.t5_training import T5TrainingConfig
from ..core.entry import training_main

main = training_main("python3 -m nemo_launcher.jobs.t5.train", T5TrainingConfig, f"{__package__}.recipe", recipe="T5")

if __name__ == "__main__":
    sys.exit(main())
