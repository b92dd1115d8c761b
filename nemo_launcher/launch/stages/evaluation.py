"""Evaluation stage: lm-eval on a converted `.nemo`, task data from local files.

    python3 main.py stages=[training,conversion,evaluation] training=gpt3/126m
    python3 main.py stages=[evaluation] evaluation=gpt3/evaluate_lambada evaluation.run.model_train_name=gpt3_5b

One job of TP processes (model.tensor_model_parallel_size), spread over run.nodes x run.ntasks_per_node.
"""
from typing import List

from ..families import family_for, program_for, schema_for
from ..job_spec import Command, JobSpec
from .base import Stage

SAMPLE_DATA_PROGRAM = "nemo_launcher.jobs.gpt.sample_eval_data"


class EvaluationStage(Stage):
    kind = "evaluation"

    def job_specs(self) -> List[JobSpec]:
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        family = family_for(self.kind, self.choice)
        program = program_for(family, self.kind, self.choice)
        config, cfg = self.bind(schema_for(family, self.kind))
        commands = (Command(program, ("--config", str(self.config_file(cfg.run)))),)
        if cfg.run.prepare_sample_data:
            # Smoke-test task files made from local text, for machines that cannot fetch the real task data.
            sample = Command(SAMPLE_DATA_PROGRAM, ("--task-data-dir", cfg.run.task_data_dir), distributed=False)
            commands = (sample,) + commands
        return self.one_job(config, cfg.run, commands, nodes=cfg.run.nodes, tasks_per_node=cfg.run.ntasks_per_node,
                            **self.files_of(cfg))
