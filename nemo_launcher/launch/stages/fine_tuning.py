"""Fine-tuning stage: supervised fine-tuning (SFT) of a converted `.nemo` on prompt/answer jsonl files.

    python3 main.py stages=[fine_tuning] fine_tuning=gpt3/squad fine_tuning.run.model_train_name=gpt3_126m

One job of trainer.num_nodes x trainer.devices processes. When the config has a `squad_preparation`
section, a single-task command first turns the SQuAD v1.1 JSON files into the jsonl the trainer reads
(it skips files that are already there), so the data is ready before any GPU process starts.
"""
from typing import List

from ..families import family_for, program_for, schema_for
from ..job_spec import Command, JobSpec
from .base import Stage, tensor_parallel_env

# SQuAD JSON -> prompt/answer jsonl. Standard library only, and the same for every decoder family.
SQUAD_PROGRAM = "nemo_launcher.jobs.data.squad"


class FineTuningStage(Stage):
    kind = "fine_tuning"

    def job_specs(self) -> List[JobSpec]:
        family = family_for(self.kind, self.choice)
        program = program_for(family, self.kind, self.choice)
        config, cfg = self.bind(schema_for(family, self.kind))
        config_file = str(self.config_file(cfg.run))
        commands = []
        if cfg.squad_preparation is not None:
            commands.append(Command(SQUAD_PROGRAM, ("--config", config_file), distributed=False))
        commands.append(Command(program, ("--config", config_file)))
        return self.one_job(config, cfg.run, commands, nodes=cfg.trainer.num_nodes, tasks_per_node=cfg.trainer.devices,
                            env=tensor_parallel_env(cfg.model.tensor_model_parallel_size), **self.files_of(cfg))
