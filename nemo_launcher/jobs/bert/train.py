"""BERT pre-training: megatron-core BertModel, PyTorch Lightning loop (the trainer core, with the BERT recipe).

    python3 -u -m nemo_launcher.jobs.bert.train --config <job dir>/<run.name>_hydra.yaml
    (torchrun, srun: as gpt/train.py)

What it reads and writes, resuming, stop signals and exit codes (0, 2, 74, 75): core/program.py.

Nothing heavy is imported at module level (core/entry.py says why).
"""

import sys

from ...contract.schemas.bert_training import BertTrainingConfig
from ..core.entry import training_main

main = training_main(
    "python3 -m nemo_launcher.jobs.bert.train", BertTrainingConfig, f"{__package__}.recipe", recipe="bert_recipe"
)

if __name__ == "__main__":
    sys.exit(main())
