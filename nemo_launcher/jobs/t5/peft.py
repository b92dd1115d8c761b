"""LoRA on a frozen T5 or mT5 `.nemo`: adapters on the attention of every encoder and decoder layer (self and
cross), the rest frozen, on the trainer core.

    python3 -u -m nemo_launcher.jobs.t5.peft --config <job dir>/<run.name>_hydra.yaml

The peft program (tuning/job.py's run_sft) with a T5 base: the section (schema gpt_sft) and the method
(tuning/lora.py) are GPT's, the base is loaded as T5's other tuning methods load it (t5/tuning.load_base_model: any
TP the heads allow), the samples are prompt/answer jsonl laid out for an encoder and a decoder (answer_data.py). At
the last step it writes to <explicit_log_dir>/checkpoints/:
- <name>.nemo: the adapter file (the LoRA settings and the adapters alone, whole whatever the TP);
- <name>_merged.nemo (model.peft.merge: true): the base with every update added into its weights, a plain T5
  .nemo in the layout it was trained in, which evaluation and export read like any other.
Exit codes: 0 done (or stopped and saved), 2 configuration error, 74 a file could not be saved (no space or
permission), 75 explicit_log_dir is in use by another job, anything else a crash.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.t5.peft"


def tuning_job(cfg, stage: str):
    from ..tuning.lora import LoraMethod
    from .answer_data import T5AnswerData
    from .prompt_tuning import T5Tuning

    method = LoraMethod(
        cfg.model.peft, cfg.model.seed, cfg.exp_manager.nemo_path(), cfg.exp_manager.nemo_path("_merged")
    )
    job = T5Tuning(cfg, stage, cfg.model.restore_from_path, T5AnswerData(cfg.model.data), method)
    job.base_key = "model.restore_from_path"
    return job


def main(argv=None) -> int:
    from ..tuning.job import run_sft  # deferred: the trainer's modules load after the program starts

    return run_sft(argv, "peft", PROG, tuning_job)


if __name__ == "__main__":
    sys.exit(main())
