"""Export stage: a Triton model repository whose Python backend generates text with a converted `.nemo`.

    python3 main.py stages=[export] export=gpt3/export_gpt3 export.run.model_train_name=gpt3_126m
    python3 main.py stages=[export] export=t5/export_t5 export.run.model_train_name=t5_220m

One single-task job that reads the `.nemo` and writes
`<triton_deployment.triton_model_dir>/{config.pbtxt, 1/model.py, 1/<model files>}`; it needs no GPU. The vision
families (export=vit/export_vit, clip/export_clip) write ONNX graphs, TensorRT engines where TensorRT imports (on
a GPU when trainer.accelerator is gpu) and Triton entries under infer.out_path.
Serve the result with tritonserver (see deployment/README.md) or locally with deployment/serve_pytriton.py.
"""

from ..job_spec import JobSpec
from .base import Stage


class ExportStage(Stage):
    kind = "export"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        command = self.program_command(program, cfg, distributed=False)
        # A Triton repository is written on a CPU; a schema whose export builds TensorRT engines asks for a GPU.
        uses_gpus = cfg.uses_gpus() if hasattr(cfg, "uses_gpus") else False
        return self.one_job(config, cfg.run, [command], uses_gpus=uses_gpus, **self.files_of(cfg))
