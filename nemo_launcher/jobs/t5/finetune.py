"""T5/mT5 fine-tuning: every weight of a converted .nemo trained on source/target text pairs, on the trainer core.

    python3 -u -m nemo_launcher.jobs.t5.finetune --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.t5.finetune --config ...      (several processes here)

Reads the resolved `fine_tuning` section (schema: contract/schemas/t5_finetuning.py), starts from
model.restore_from_path and trains trainer.max_steps steps on model.data.train_ds, validating on validation_ds
(loss, and exact_string_match or SQuAD exact match and F1 of greedy answers). TensorBoard events and step-<N>
checkpoints go to exp_manager.explicit_log_dir; a rerun, or a job requeued after SIGTERM/SIGUSR1 or max_time,
continues from the newest complete checkpoint exactly as an uninterrupted run would have gone on. At the end the
tuned model is written to <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo, which evaluation and export read.
SQuAD-format JSON is turned into text pairs beforehand by nemo_launcher.jobs.t5.squad_data (a separate command
the launcher runs first). Exit codes as every trainer's (core/program.py): 0, 2, 74, 75.

Only the standard library is imported at module level: dist_checkpointing starts a helper process by spawning,
which re-imports this module.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.t5.finetune"


def main(argv=None) -> int:
    from ...contract.schemas.t5_finetuning import T5FinetuneConfig
    from ..core.program import run_program

    return run_program(argv, PROG, T5FinetuneConfig, _recipe, build=_build_parts, module_class=_module)


# The T5 and Lightning modules load only once run_program has set up the job's logging.
def _recipe(cfg):
    from .tuning import tuning_recipe

    return tuning_recipe(cfg)


def _build_parts(*args):
    from .tuning import build_tuning_parts

    return build_tuning_parts(*args)


def _module(parts):
    from .tuning import Seq2SeqTuningModule

    return Seq2SeqTuningModule(parts)


if __name__ == "__main__":
    sys.exit(main())
