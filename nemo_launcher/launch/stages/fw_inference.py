"""Framework inference stage: a trained model run in its own framework on the inputs its config names.

    python3 main.py stages=[training,fw_inference] training=dit/tiny fw_inference=dit/sample_shapes

One job of run.nodes x run.ntasks_per_node processes running the family's inference program (DiT: samples from
prompts, written as images).
"""

from ..job_spec import Command, JobSpec
from .base import Stage


class FwInferenceStage(Stage):
    kind = "fw_inference"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        command = Command(program, ("--config", str(self.config_file(cfg.run))))
        return self.one_job(
            config,
            cfg.run,
            [command],
            nodes=cfg.run.nodes,
            tasks_per_node=cfg.run.ntasks_per_node,
            **self.files_of(cfg),
        )
