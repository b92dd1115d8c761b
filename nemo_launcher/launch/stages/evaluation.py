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

import dataclasses
from pathlib import Path

from ..families import program_for, schema_for
from ..job_spec import Command, JobSpec
from .base import Stage, dump_config


class EvaluationStage(Stage):
    kind = "evaluation"

    def job_specs(self) -> list[JobSpec]:
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        family, program, config, cfg = self.bind_family()
        if hasattr(cfg, "steps"):
            return self.step_jobs(program, config, cfg)
        conversion = self.conversion_first(family, cfg)
        commands = self.preparation(family, cfg) + conversion[0] + (self.program_command(program, cfg),)
        (spec,) = self.run_sized_job(config, cfg, commands)
        return [dataclasses.replace(spec, files=spec.files + conversion[1])]

    def conversion_first(self, family, cfg) -> tuple[tuple[Command, ...], tuple[tuple[Path, str], ...]]:
        """(commands, files) of the family's conversion program run before the evaluation in the same job, when the
        bound config evaluates a training checkpoint (its `conversion_section()`): the section is bound to the
        conversion schema here, as the conversion job will bind it, and written beside the evaluation's config."""
        section = getattr(cfg, "conversion_section", lambda: None)()
        if section is None:
            return (), ()
        from .base import load_schema

        converted = self.bind_section(load_schema(schema_for(family, "conversion")), section, "conversion")
        config_file = self.config_file(converted.run)
        program = program_for(family, "conversion", self.choice)
        return (Command(program, ("--config", str(config_file))),), ((config_file, dump_config(section)),)
