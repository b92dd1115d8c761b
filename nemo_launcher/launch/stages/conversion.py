r"""Conversion stage: a training checkpoint -> `<train dir>/convert_nemo/results/<nemo_file_name>`.

The GPT family also exports a Hugging Face checkpoint where an architecture matches (its schema's `hf` section).

    python3 main.py stages=[training,conversion] training=gpt3/126m
    python3 main.py stages=[conversion] conversion.run.model_train_name=gpt3_5b \
        conversion.model.tensor_model_parallel_size=2

One job of TP x PP processes (the layout of the .nemo), spread over run.nodes x run.ntasks_per_node; the
config derives those from cluster.gpus_per_node. Each process reads its slice of the checkpoint.
"""

from ..job_spec import JobSpec
from .base import Stage


class ConversionStage(Stage):
    kind = "conversion"

    def job_specs(self) -> list[JobSpec]:
        # run.nodes divides by these inside an interpolation: a 0 must be reported as itself, not as a division.
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        _, program, config, cfg = self.bind_family()
        return self.run_sized_job(config, cfg, [self.program_command(program, cfg)])
