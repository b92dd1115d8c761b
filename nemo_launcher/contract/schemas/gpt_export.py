"""Schema of the resolved `export` section of the GPT family (conf/export/gpt3/export_gpt3.yaml): a Triton
model repository whose Python backend serves the model in one process per instance.

    cfg = ExportConfig.from_dict(section)
    cfg.check_model_section("export", nemo_model_config, "<path> (its model_config.yaml)")

The .nemo may hold TP x PP shards (the conversion writes one per model-parallel rank); the export job gathers them
into one model, since a Python backend instance is one process. export.model.tensor_model_parallel_size and
export.triton_deployment.pipeline_model_parallel_size state that layout (the seed's keys; they also name the results
folder). check_model_section holds them against the model that will be read: the launcher calls it with the .nemo's
model_config.yaml when the file is there (or with the conversion section of the same pipeline, which writes it), the
job with the archive it opens, before any weight is read.
"""

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

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
class ModelLayout:
    """What the export checks its TP and PP against, and where that came from (named in every message)."""

    tensor_parallel: int  # shards along the tensor dimension
    pipeline_parallel: int  # pipeline stages
    num_attention_heads: int | None  # None where the source does not say
    num_query_groups: int | None
    num_layers: int | None
    source: str  # the model, as messages name it: "/r/megatron_gpt.nemo (its model_config.yaml)"

    @classmethod
    def of_model_section(cls, model: Mapping[str, Any], source: str) -> "ModelLayout":
        """From a `model:` section as a .nemo stores it (absent parallel sizes mean 1)."""

        def number(name: str) -> int | None:
            value = model.get(name)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            tensor_parallel=number("tensor_model_parallel_size") or 1,
            pipeline_parallel=number("pipeline_model_parallel_size") or 1,
            num_attention_heads=number("num_attention_heads"),
            num_query_groups=number("num_query_groups") or number("num_attention_heads"),
            num_layers=number("num_layers"),
            source=source,
        )


@dataclasses.dataclass(frozen=True)
class ExportModel:
    """The `.nemo` to export. The base rule (T5's export, t5_export.py, binds it) takes unsharded archives only;
    GPT's export gathers shards (ShardedExportModel)."""

    written_by_conversion: ClassVar[str] = "<train dir>/convert_nemo/results/megatron_gpt.nemo"  # for the message below

    checkpoint_path: str  # the .nemo to export
    weight_data_type: DataType  # dtype of the stored weights
    tensor_model_parallel_size: int = 1  # TP of the .nemo read: 1 here, any in ShardedExportModel

    def check(self, key: str) -> None:
        self.check_tensor_parallel(key)
        absolute_path_fields(
            self,
            key,
            "checkpoint_path",
            fix=f"name the .nemo to export by absolute path (the conversion stage writes {self.written_by_conversion})",
        )

    def check_tensor_parallel(self, key: str) -> None:
        must_be_one(
            self,
            key,
            "tensor_model_parallel_size",
            fix="the Triton Python backend serves a model in one process per instance: set 1",
        )


@dataclasses.dataclass(frozen=True)
class ShardedExportModel(ExportModel):
    """GPT's: tensor_model_parallel_size is the TP the .nemo was converted at (its tp_rank_XX shards, as
    conversion.model.tensor_model_parallel_size wrote them). The job gathers the shards into one model, so the
    repository always holds a TP=1 PP=1 .nemo; ExportConfig.check_model_section holds the value against the model."""

    def check_tensor_parallel(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size")


@dataclasses.dataclass(frozen=True)
class TritonDeployment:
    triton_model_dir: str  # <model_repo>/<model name>
    data_type: DataType  # dtype the model computes in while serving
    max_batch_size: int = 1  # prompts per request
    tokens_to_generate: int = 32  # new tokens per prompt when a request does not say
    instance_count: int = 1  # model copies per device
    instance_kind: Literal["KIND_AUTO", "KIND_GPU", "KIND_CPU"] = "KIND_AUTO"
    pipeline_model_parallel_size: int = 1  # PP of the .nemo read; 1 unless the family's export gathers stages
    int8_mode: bool = False  # FasterTransformer option; must be false
    enable_custom_all_reduce: bool = False  # FasterTransformer option; must be false

    def check(self, key: str) -> None:
        positive_fields(self, key, "max_batch_size", "tokens_to_generate", "instance_count")
        self.check_pipeline_parallel(key)
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

    def check_pipeline_parallel(self, key: str) -> None:
        no_pipeline_parallel(self, key, "the Triton Python backend serves a model in one process per instance: set 1")


@dataclasses.dataclass(frozen=True)
class ShardedTritonDeployment(TritonDeployment):
    """GPT's: pipeline_model_parallel_size is the PP the .nemo was converted at
    (conversion.model.pipeline_model_parallel_size); its stages are gathered like the TP shards."""

    def check_pipeline_parallel(self, key: str) -> None:
        positive_fields(self, key, "pipeline_model_parallel_size")


@dataclasses.dataclass(frozen=True)
class ExportConfig(StageSchema, stage=STAGE):
    run: ExportRun
    model: ShardedExportModel
    triton_deployment: ShardedTritonDeployment

    def check_model_section(self, key: str, model: Mapping[str, Any], source: str) -> None:
        """The stated TP and PP against the `model:` section (as a .nemo stores it) of the model the export will
        read, and they split it evenly; source says where the section came from, for the message."""
        layout = ModelLayout.of_model_section(model, source)
        stated = (
            (f"{key}.model.tensor_model_parallel_size", self.model.tensor_model_parallel_size, layout.tensor_parallel),
            (
                f"{key}.triton_deployment.pipeline_model_parallel_size",
                self.triton_deployment.pipeline_model_parallel_size,
                layout.pipeline_parallel,
            ),
        )
        for name, value, actual in stated:
            if value != actual:
                raise config_fault(
                    name,
                    value,
                    f"{layout.source} has TP({layout.tensor_parallel}) x PP({layout.pipeline_parallel}) shards: "
                    f"set {actual} (the export gathers them into one model)",
                )
        tensor_parallel = self.model.tensor_model_parallel_size
        for what, count in (("heads", layout.num_attention_heads), ("query groups", layout.num_query_groups)):
            if count is not None and count % tensor_parallel:
                raise config_fault(
                    f"{key}.model.tensor_model_parallel_size",
                    tensor_parallel,
                    f"the model ({layout.source}) has {count} attention {what}, which TP({tensor_parallel}) "
                    "does not divide",
                )
        pipeline_parallel = self.triton_deployment.pipeline_model_parallel_size
        if layout.num_layers is not None and layout.num_layers % pipeline_parallel:
            raise config_fault(
                f"{key}.triton_deployment.pipeline_model_parallel_size",
                pipeline_parallel,
                f"the model ({layout.source}) has {layout.num_layers} layers, which PP({pipeline_parallel}) "
                "does not divide",
            )

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.model.checkpoint_path", self.model.checkpoint_path)]

    def writes(self) -> list[str]:
        return [self.run.results_dir, str(Path(self.triton_deployment.triton_model_dir).parent)]
