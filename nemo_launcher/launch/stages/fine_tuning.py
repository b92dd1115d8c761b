"""Fine-tuning stage: every weight of a converted `.nemo` tuned on the family's task data.

GPT reads prompt/answer jsonl files (supervised fine-tuning, loss on the answers); T5/mT5 source/target text files.

    python3 main.py stages=[fine_tuning] fine_tuning=gpt3/squad fine_tuning.run.model_train_name=gpt3_126m
    python3 main.py stages=[fine_tuning] fine_tuning=t5/squad fine_tuning.run.model_train_name=t5_220m

One job of trainer.num_nodes x trainer.devices processes. When the config asks for it (a `squad_preparation`
section), the family's preparation program first turns the SQuAD-format JSON into the files the trainer reads,
in one process (it keeps files that are already there), so the data is ready before any GPU process starts.
Tuning runs on the trainer core, which resumes from its checkpoints: on Slurm the job gets the time-limit
warning signal, saves, and requeues itself when it stopped before trainer.max_steps.
"""

import dataclasses
from pathlib import Path

from ...contract import RESUME_MARKER
from ...contract.model_facts import ModelFacts
from ...contract.schemas.gpu_training import ordered_kernel_queue_env
from ..job_spec import JobSpec
from ..predictions import predict
from .base import Stage


class FineTuningStage(Stage):
    kind = "fine_tuning"
    # The performance model counts a tuning of every weight, and LoRA-style PEFT (model.peft.peft_scheme) as a
    # frozen base; the prompt, adapter and IA3 stages' own sections it does not read.
    predicted_on_its_model = True

    def job_specs(self) -> list[JobSpec]:
        family, program, config, cfg = self.bind_family()
        self.section, self.bound = config, cfg
        commands = self.preparation(family, cfg) + (self.program_command(program, cfg),)
        return self.one_job(
            config,
            cfg.run,
            commands,
            nodes=self.node_count("trainer.num_nodes", cfg.trainer.num_nodes),
            tasks_per_node=cfg.trainer.devices,
            env=ordered_kernel_queue_env(cfg.model),
            checkpoint_signal=True,
            requeue_marker=Path(cfg.exp_manager.explicit_log_dir) / RESUME_MARKER,
            **self.files_of(cfg),
            **self.performance_of(config, cfg),
        )

    def with_loaded_model(self, specs: list[JobSpec], facts: ModelFacts | None) -> list[JobSpec]:
        """Predicted on the architecture of the model it loads, with this section's own settings (layout, batch
        sizes, PEFT scheme, trainer) laid over it."""
        if not self.predicted_on_its_model or facts is None or facts.section is None:
            return specs
        prediction = predict(self.kind, self.section, self.context, base_model=facts.section)
        return [dataclasses.replace(spec, prediction=prediction) for spec in specs]
