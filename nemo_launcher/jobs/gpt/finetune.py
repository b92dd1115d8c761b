"""Supervised fine-tuning (SFT) of a GPT `.nemo` on prompt/answer jsonl files; every weight trains.

    python3 -u -m nemo_launcher.jobs.gpt.finetune --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.finetune --config ...      (several processes here)

Reads the resolved `fine_tuning` section, starts from model.restore_from_path and trains trainer.max_steps steps on
the trainer core (core/program.py: TensorBoard/W&B under exp_manager.explicit_log_dir, checkpoints in its
checkpoints/step-<N>, exact resume after a kill, max_time, stop signals, self-requeue) with the loss on answer
tokens (model.answer_only_loss). At the last step it writes <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo,
which the export and evaluation stages read like any converted model. Exit codes: 0 done (or stopped and saved),
2 configuration error, 74 a checkpoint or the model could not be saved (no space or permission), 75
explicit_log_dir is in use by another job, else a crash.

Only the standard library is imported at module level (dist_checkpointing's helper process re-imports it).
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.gpt.finetune"


def tuning_job(cfg, stage: str):
    """The GptTuning of a bound `fine_tuning` or `peft` section (SftConfig): its data, and all weights or LoRA."""
    from ..tuning.answer_data import PromptAnswerData
    from ..tuning.job import AllWeights
    from ..tuning.lora import LoraMethod
    from .tuning import GptTuning

    peft = cfg.model.peft
    if peft is None:
        method = AllWeights(cfg.exp_manager.nemo_path())
    else:
        method = LoraMethod(peft, cfg.model.seed, cfg.exp_manager.nemo_path(), cfg.exp_manager.nemo_path("_merged"))
    data = PromptAnswerData(cfg.model.data, cfg.model.answer_only_loss)
    return GptTuning(cfg, stage, cfg.model.restore_from_path, data, method)


def run(argv, stage: str, prog: str, make_job=tuning_job) -> int:
    """The fine_tuning and peft programs with GPT's tuning job (tuning/job.py's run_sft)."""
    from ..tuning.job import run_sft  # deferred: the trainer's modules load after the program starts

    return run_sft(argv, stage, prog, make_job)


def main(argv=None) -> int:
    return run(argv, "fine_tuning", PROG)


if __name__ == "__main__":
    sys.exit(main())
