"""Framework inference stage: a trained model run in its own framework on the inputs its config names.

    python3 main.py stages=[training,fw_inference] training=dit/tiny fw_inference=dit/sample_shapes

One job of run.nodes x run.ntasks_per_node processes running the family's inference program (DiT: samples from
prompts, written as images).
"""

from ..job_spec import JobSpec
from .base import Stage


class FwInferenceStage(Stage):
    kind = "fw_inference"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        return self.run_sized_job(config, cfg, [self.program_command(program, cfg)])
