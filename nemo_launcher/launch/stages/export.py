"""Export stage: a Triton model repository whose Python backend generates text with a converted `.nemo`.

    python3 main.py stages=[export] export=gpt3/export_gpt3 export.run.model_train_name=gpt3_126m
    python3 main.py stages=[export] export=gpt3/export_gpt3 export.model.tensor_model_parallel_size=2
    python3 main.py stages=[export] export=t5/export_t5 export.run.model_train_name=t5_220m

One single-task job that reads the `.nemo` and writes
`<triton_deployment.triton_model_dir>/{config.pbtxt, 1/model.py, 1/<model files>}`; it needs no GPU. A GPT `.nemo`
converted at TP/PP > 1 is gathered into one model by the job; its schema's check_model_section compares the stated
TP/PP with the model that will be read, here before anything is queued: the conversion stage of the same pipeline
when that writes the file, else the `.nemo` already on disk (its model_config.yaml, read without torch).
The vision families (export=vit/export_vit, clip/export_clip) write ONNX graphs, TensorRT engines where TensorRT
imports (on a GPU when trainer.accelerator is gpu) and Triton entries under infer.out_path.
Serve the result with tritonserver (see deployment/README.md) or locally with deployment/serve_pytriton.py.
"""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import OmegaConf

from ...contract.binding import JobConfigError
from ...contract.model_facts import NEMO_CONFIG_MEMBER, ModelFileError, read_nemo_config
from ...contract.schemas.common_conversion import nemo_path
from ..errors import ConfigError, config_error
from ..job_spec import JobSpec
from .base import Stage


class ExportStage(Stage):
    kind = "export"

    def job_specs(self) -> list[JobSpec]:
        _, program, config, cfg = self.bind_family()
        check_model = getattr(cfg, "check_model_section", None)  # a schema that checks the layout it will read
        if check_model is not None:
            found = self.model_to_export(cfg.model.checkpoint_path)
            if found is not None:
                try:
                    check_model(self.kind, *found)
                except JobConfigError as error:
                    raise ConfigError(str(error)) from None
        command = self.program_command(program, cfg, distributed=False)
        # A Triton repository is written on a CPU; a schema whose export builds TensorRT engines asks for a GPU.
        uses_gpus = cfg.uses_gpus() if hasattr(cfg, "uses_gpus") else False
        return self.one_job(config, cfg.run, [command], uses_gpus=uses_gpus, **self.files_of(cfg))

    def model_to_export(self, checkpoint_path: str) -> tuple[dict[str, Any], str] | None:
        """(`model:` section, where it came from) of the .nemo the job will read, when the launcher can know it:
        None for a file that neither exists yet nor comes from this pipeline (the job checks it when it starts)."""
        stages = [str(name) for name in self.root.stages]
        if "conversion" in stages[: stages.index(self.kind)] and self.root.get("conversion") is not None:
            conversion = OmegaConf.to_container(self.root.conversion, resolve=True)
            # The conversion stage, earlier in the pipeline, has bound its section already: its run keys are valid.
            written = nemo_path(SimpleNamespace(**conversion["run"]))
            if written == Path(checkpoint_path):  # rewritten by this pipeline: whatever is there now is replaced
                return dict(conversion.get("model") or {}), "the .nemo this pipeline's conversion stage writes"
        path = Path(checkpoint_path)
        if not path.is_file():
            return None
        try:
            return read_nemo_config(path), f"{path} (its {NEMO_CONFIG_MEMBER})"
        except ModelFileError as error:
            raise config_error(self.key("model", "checkpoint_path"), str(path), str(error)) from None
