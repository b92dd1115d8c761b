r"""Hugging Face export stage: a GPT `.nemo` -> a folder `transformers` loads with the same logits.

    python3 main.py stages=[conversion_nemo2hf] conversion_nemo2hf=llama/nemo_to_hf \
        conversion_nemo2hf.model.nemo_file=/results/llama2_7b/peft_squad/results/checkpoints/megatron_llama_peft_lora_merged.nemo

One job of one process (the .nemo's shards are merged on the CPU). The family's row names the program and the
schema; the stage knows no family.
"""

from ..job_spec import JobSpec
from .base import Stage


class ConversionNemo2HFStage(Stage):
    kind = "conversion_nemo2hf"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        return self.run_sized_job(config, cfg, [self.program_command(program, cfg)])
