"""Evaluation stage: a converted or fine-tuned `.nemo` scored on task data read from local files.

GPT runs lm-eval's tasks on the converted model; T5/mT5 score a fine-tuned model's answers (exact match, F1).

    python3 main.py stages=[training,conversion,evaluation] training=gpt3/126m
    python3 main.py stages=[evaluation] evaluation=gpt3/evaluate_lambada evaluation.run.model_train_name=gpt3_5b
    python3 main.py stages=[evaluation] evaluation=t5/squad evaluation.run.model_train_name=t5_220m

One job of TP processes (model.tensor_model_parallel_size), spread over run.nodes x run.ntasks_per_node. When
the config asks for it, the family's preparation program writes the task files first, in one process. A schema
that plans steps (stable_diffusion/fid_clip: generate -> fid -> clip -> plot) gets one job per step instead, each
running `<the family's evaluation package>.<step>`, chained as data preparation's steps are.
"""

from ..job_spec import JobSpec
from .base import Stage


class EvaluationStage(Stage):
    kind = "evaluation"

    def job_specs(self) -> list[JobSpec]:
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        family, program, config, cfg = self.bind_family()
        if hasattr(cfg, "steps"):
            return self.step_jobs(program, config, cfg)
        return self.run_sized_job(config, cfg, self.preparation(family, cfg) + (self.program_command(program, cfg),))
