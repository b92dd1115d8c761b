"""Supervised fine-tuning (SFT) of a GPT `.nemo` on prompt/answer jsonl files; every weight trains.

    python3 -u -m nemo_launcher.jobs.gpt.finetune --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.finetune --config ...      (several processes here)

Reads the resolved `fine_tuning` section, starts from model.restore_from_path, trains trainer.max_steps
steps with the loss on answer tokens (model.answer_only_loss), logs to <explicit_log_dir>/metrics.jsonl
and writes the result to <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo, which the export and
evaluation stages read like any converted model. Exit codes: 0 done, 2 configuration error, 74 the model
could not be saved (no space or permission), 75 explicit_log_dir is in use by another job, else a crash.
"""
import sys

from .sft_program import run_program


def fine_tune(cfg, placement) -> str:
    from . import sft_train

    session = sft_train.start(cfg, placement)
    history = sft_train.train(session)
    path = cfg.exp_manager.nemo_path()
    sft_train.save_model(session, session.model, path)
    sft_train.training_summary(session, history, {"fine-tuned model": path}).show(placement.rank)
    return path


def main(argv=None) -> int:
    return run_program(argv, "fine_tuning", "nemo_launcher.jobs.gpt.finetune", fine_tune)


if __name__ == "__main__":
    sys.exit(main())
