r"""Hugging Face import stage: a Hugging Face model folder -> `<run.results_dir>/results/<run.nemo_file_name>` and a
megatron-core distributed checkpoint beside it (results/checkpoints/step-0), at the TP/PP the config asks for.

    python3 main.py stages=[conversion_hf2nemo] conversion_hf2nemo=hf_llama2/convert_llama2_nemo \
        conversion_hf2nemo.run.huggingface_ckpt_path=/data/hf/Llama-2-7b-hf

One job of TP x PP processes over run.nodes x run.ntasks_per_node (the config derives them from
cluster.gpus_per_node). Which program runs and which schema binds the section come from the family's row (the
config's folder: hf_llama2, hf_mistral_7b, hf_mixtral, hf_qwen2); binding reads the folder's config.json when it
exists, so an architecture the converter cannot represent exactly is refused here.
"""

from ..job_spec import JobSpec
from .base import Stage


class ConversionHF2NemoStage(Stage):
    kind = "conversion_hf2nemo"

    def job_specs(self) -> list[JobSpec]:
        # run.nodes divides by these inside an interpolation: a 0 must be reported as itself, not as a division.
        self.check_divisors("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size")
        _, program, config, cfg = self.bind_family()
        return self.run_sized_job(config, cfg, [self.program_command(program, cfg)])
