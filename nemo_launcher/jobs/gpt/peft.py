"""LoRA fine-tuning of a GPT `.nemo`: the base weights stay frozen, only the adapters train.

    python3 -u -m nemo_launcher.jobs.gpt.peft --config <job dir>/<run.name>_hydra.yaml

Reads the resolved `peft` section and trains on the trainer core as fine-tuning does (finetune.py); its
checkpoints hold the adapters and their optimizer state only. At the last step it writes to
<explicit_log_dir>/checkpoints/:
- <name>.nemo: the adapter file, a .nemo holding only the adapter weights and the LoRA settings
  (merge it later with `python3 -m nemo_launcher.jobs.gpt.lora_merge`);
- <name>_merged.nemo (model.peft.merge: true): the base model with every update added into its weights,
  a plain GPT .nemo that export and evaluation read like any other.
Exit codes: 0 done (or stopped and saved), 2 configuration error, 74 a file could not be saved (no space or
permission), 75 explicit_log_dir is in use by another job, anything else a crash.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.gpt.peft"


def main(argv=None) -> int:
    from .finetune import run

    return run(argv, "peft", PROG)


if __name__ == "__main__":
    sys.exit(main())
