"""Training stage: one job running the family's trainer on trainer.num_nodes x trainer.devices processes.

Every rule about the section (keys, types, the TP/PP/batch arithmetic) is the schema's
(`nemo_launcher.contract.schemas.<family>_training`), bound here before anything is written.
"""
from pathlib import Path
from typing import List

from ...contract import RESUME_MARKER
from ..job_spec import Command, JobSpec
from .base import Stage, tensor_parallel_env


class TrainingStage(Stage):
    kind = "training"

    def job_specs(self) -> List[JobSpec]:
        _, program, config, cfg = self.bind_family()
        command = Command(program, ("--config", str(self.config_file(cfg.run))))
        marker = Path(cfg.exp_manager.explicit_log_dir) / RESUME_MARKER if cfg.run.auto_requeue else None
        return self.one_job(config, cfg.run, [command], nodes=cfg.trainer.num_nodes, tasks_per_node=cfg.trainer.devices,
                            env=tensor_parallel_env(cfg.model.tensor_model_parallel_size),
                            checkpoint_signal=True, requeue_marker=marker, **self.files_of(cfg))
