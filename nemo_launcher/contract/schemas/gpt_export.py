"""Schema of the resolved `export` section of the GPT family (conf/export/gpt3/export_gpt3.yaml): a Triton
model repository whose Python backend serves the model in one process per instance."""

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

from ..binding import (
    StageSchema,
    absolute_path_fields,
    config_fault,
    field_fault,
    must_be_one,
    no_pipeline_parallel,
    positive_fields,
)
from .run import RunBase

STAGE = "export"
DataType = Literal["fp32", "fp16", "bf16"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportRun(RunBase):
    model_train_name: str | None = None  # the training run whose converted model is exported
    training_dir: str | None = None
    convert_name: str | None = None
    config_summary: str | None = None  # tp<TP>_pp<PP>_<weights>_<compute>, names the results folder
    model_type: Literal["gpt3"] = "gpt3"


@dataclasses.dataclass(frozen=True)
class ExportModel:
    written_by_conversion: ClassVar[str] = "<train dir>/convert_nemo/results/megatron_gpt.nemo"  # for the message below

    checkpoint_path: str  # the .nemo to export
    weight_data_type: DataType  # dtype of the stored weights
    tensor_model_parallel_size: int = 1  # must be 1: the Python backend runs a model in one process

    def check(self, key: str) -> None:
        must_be_one(
            self,
            key,
            "tensor_model_parallel_size",
            fix="the Triton Python backend serves a model in one process per instance: set 1",
        )
        absolute_path_fields(
            self,
            key,
            "checkpoint_path",
            fix=f"name the .nemo to export by absolute path (the conversion stage writes {self.written_by_conversion})",
        )


@dataclasses.dataclass(frozen=True)
class TritonDeployment:
    triton_model_dir: str  # <model_repo>/<model name>
    data_type: DataType  # dtype the model computes in while serving
    max_batch_size: int = 1  # prompts per request
    tokens_to_generate: int = 32  # new tokens per prompt when a request does not say
    instance_count: int = 1  # model copies per device
    instance_kind: Literal["KIND_AUTO", "KIND_GPU", "KIND_CPU"] = "KIND_AUTO"
    pipeline_model_parallel_size: int = 1  # must be 1
    int8_mode: bool = False  # FasterTransformer option; must be false
    enable_custom_all_reduce: bool = False  # FasterTransformer option; must be false

    def check(self, key: str) -> None:
        positive_fields(self, key, "max_batch_size", "tokens_to_generate", "instance_count")
        no_pipeline_parallel(self, key, "the Triton Python backend serves a model in one process per instance: set 1")
        for name in ("int8_mode", "enable_custom_all_reduce"):
            if getattr(self, name):
                raise config_fault(
                    f"{key}.{name}",
                    True,
                    "is a FasterTransformer option; the Python backend has no such kernels: set false",
                )
        path = Path(self.triton_model_dir)
        if not path.is_absolute() or not path.name:
            raise field_fault(
                self,
                key,
                "triton_model_dir",
                "an absolute path ending in the served model's name, e.g. /results/model_repo/gpt3_5b",
            )


@dataclasses.dataclass(frozen=True)
class ExportConfig(StageSchema, stage=STAGE):
    run: ExportRun
    model: ExportModel
    triton_deployment: TritonDeployment

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.model.checkpoint_path", self.model.checkpoint_path)]

    def writes(self) -> list[str]:
        return [self.run.results_dir, str(Path(self.triton_deployment.triton_model_dir).parent)]
