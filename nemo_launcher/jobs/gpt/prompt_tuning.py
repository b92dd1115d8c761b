"""Prompt learning (p-tuning, prompt tuning), Houlsby adapters and IA3 on a frozen GPT `.nemo`, on the trainer core
(the methods themselves, and their result files, are family-neutral: tuning/peft_methods.py).

    python3 -u -m nemo_launcher.jobs.gpt.prompt_learning --config <job dir>/<run.name>_hydra.yaml
    python3 -u -m nemo_launcher.jobs.gpt.adapter_learning --config ...
    python3 -u -m nemo_launcher.jobs.gpt.ia3_learning --config ...

Reads the resolved section (schema gpt_prompt_learning), trains trainer.max_steps steps on prompt-learning jsonl
files with model.language_model_path frozen, and at the last step writes model.nemo_path: a `.nemo` holding only
the method's tensors and settings, which evaluation reads beside the base model. Checkpoints (the method's
tensors and optimizer state), resuming, max_time, stop signals, TensorBoard/W&B and the exit codes are the trainer
core's (core/program.py).
"""

PROGRAMS = {
    stage: f"python3 -m nemo_launcher.jobs.gpt.{stage}"
    for stage in ("prompt_learning", "adapter_learning", "ia3_learning")
}


def run(argv, stage: str) -> int:
    from ..tuning.peft_methods import run_method
    from ..tuning.prompt_data import PromptLearningData
    from .tuning import GptTuning

    return run_method(argv, stage, PROGRAMS[stage], GptTuning, PromptLearningData)
