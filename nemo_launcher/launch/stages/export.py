"""Export stage: a Triton model repository whose Python backend generates text with a converted `.nemo`.

    python3 main.py stages=[export] export=gpt3/export_gpt3 export.run.model_train_name=gpt3_126m

One single-task job that reads the `.nemo` and writes
`<triton_deployment.triton_model_dir>/{config.pbtxt, 1/model.py, 1/<model files>}`; it needs no GPU.
Serve the result with tritonserver (see deployment/README.md) or locally with deployment/serve_pytriton.py.
"""
from pathlib import Path
from typing import List

from ..errors import config_error
from ..families import family_for, program_for
from ..job_spec import Command, JobSpec
from .base import Stage, positive_int

WEIGHT_TYPES = ("fp32", "fp16", "bf16")
COMPUTE_TYPES = ("fp32", "fp16", "bf16")
INSTANCE_KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU")
# Options of the FasterTransformer backend that the old launcher exposed; the Python backend has no such kernels.
_FT_ONLY = ("int8_mode", "enable_custom_all_reduce")


class ExportStage(Stage):
    kind = "export"

    def job_specs(self) -> List[JobSpec]:
        config = self.resolved()
        program = program_for(family_for(self.kind, self.choice), self.kind, self.choice)
        run = self.run_section(config)
        model, triton = config.get("model") or {}, config.get("triton_deployment") or {}
        if not model.get("checkpoint_path"):
            raise config_error(self.key("model", "checkpoint_path"), model.get("checkpoint_path"),
                               "name the .nemo to export (the conversion stage writes <train dir>/convert_nemo/results/megatron_gpt.nemo)")
        # The Python backend runs each model instance in one process: no tensor or pipeline split.
        for section, name, value in (("model", "tensor_model_parallel_size", model.get("tensor_model_parallel_size", 1)),
                                     ("triton_deployment", "pipeline_model_parallel_size", triton.get("pipeline_model_parallel_size", 1))):
            if positive_int(self.key(section, name), value) != 1:
                raise config_error(self.key(section, name), value,
                                   "the Triton Python backend serves a model in one process per instance: set 1")
        if model.get("weight_data_type") not in WEIGHT_TYPES:
            raise config_error(self.key("model", "weight_data_type"), model.get("weight_data_type"), f"choose one of {', '.join(WEIGHT_TYPES)}")
        if triton.get("data_type") not in COMPUTE_TYPES:
            raise config_error(self.key("triton_deployment", "data_type"), triton.get("data_type"), f"choose one of {', '.join(COMPUTE_TYPES)}")
        for name in _FT_ONLY:
            if triton.get(name):
                raise config_error(self.key("triton_deployment", name), triton[name],
                                   "is a FasterTransformer option; the Python backend has no such kernels: set false")
        for name in ("max_batch_size", "tokens_to_generate", "instance_count"):
            positive_int(self.key("triton_deployment", name), triton.get(name))
        if triton.get("instance_kind") not in INSTANCE_KINDS:
            raise config_error(self.key("triton_deployment", "instance_kind"), triton.get("instance_kind"),
                               f"choose one of {', '.join(INSTANCE_KINDS)}")
        model_dir = triton.get("triton_model_dir")
        if not model_dir or not Path(str(model_dir)).is_absolute():
            raise config_error(self.key("triton_deployment", "triton_model_dir"), model_dir, "must be an absolute path")
        command = Command(program, ("--config", str(self.config_file(run))), distributed=False)
        return self.one_job(config, run, [command], uses_gpus=False)
