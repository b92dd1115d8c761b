"""Training stage: one job running the family's trainer on trainer.num_nodes x trainer.devices processes.

Every rule about the section (keys, types, the TP/PP/batch arithmetic) is the schema's
(`nemo_launcher.contract.schemas.<family>_training`), bound here before anything is written.
"""

from pathlib import Path

from ...contract import RESUME_MARKER
from ...contract.schemas.gpu_training import profiled_command, training_environment
from ..job_spec import Command, JobSpec
from ..secrets import refuse_secret_values
from .base import Stage


class TrainingStage(Stage):
    kind = "training"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        # With model.nsys_profile enabled, every rank starts through the profiling wrapper.
        module, args = profiled_command(
            program,
            ("--config", str(self.config_file(cfg.run))),
            getattr(cfg.model, "nsys_profile", None),
            cfg.exp_manager.explicit_log_dir,
        )
        marker = Path(cfg.exp_manager.explicit_log_dir) / RESUME_MARKER if cfg.run.auto_requeue else None
        env = training_environment(cfg)
        refuse_secret_values(env, self.key("run", "env_vars"))
        return self.one_job(
            config,
            cfg.run,
            [Command(module, args)],
            nodes=self.node_count("trainer.num_nodes", cfg.trainer.num_nodes),
            tasks_per_node=cfg.trainer.devices,
            env=env,
            checkpoint_signal=True,
            requeue_marker=marker,
            **self.files_of(cfg),
            **self.performance_of(config, cfg),
        )
