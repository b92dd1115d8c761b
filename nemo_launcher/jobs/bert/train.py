"""BERT pre-training: megatron-core BertModel, PyTorch Lightning loop (the trainer core, with the BERT recipe).

    python3 -u -m nemo_launcher.jobs.bert.train --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.bert.train --config ...     (several processes here)
    srun python3 -u -m nemo_launcher.jobs.bert.train --config ...                  (Slurm)

What it reads and writes, resuming, stop signals and exit codes (0, 2, 74, 75): core/program.py.

Only the standard library is imported at module level: dist_checkpointing starts a helper process by
spawning, which re-imports this module; it must not pay for torch and megatron a second time.
"""
import sys

PROG = "python3 -m nemo_launcher.jobs.bert.train"


def main(argv=None) -> int:
    from ..core.program import run_program
    from ...contract.schemas.bert_training import BertTrainingConfig

    return run_program(argv, PROG, BertTrainingConfig, _recipe)


def _recipe(cfg):
    from .recipe import bert_recipe

    return bert_recipe(cfg)


if __name__ == "__main__":
    sys.exit(main())
