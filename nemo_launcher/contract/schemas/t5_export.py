"""Schema of the resolved `export` section of the T5 family, T5 and mT5 (conf/export/t5/export_t5.yaml,
conf/export/mt5/export_mt5.yaml): a Triton model repository whose Python backend answers each request with the
converted model's greedy decoder output for the request's source text.

The keys and rules are GPT's (gpt_export: one process per model instance, no FasterTransformer options); only
the model types and the .nemo the conversion writes differ.
"""

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

from ..binding import StageSchema
from .gpt_export import ExportModel, ExportRun, TritonDeployment

STAGE = "export"


@dataclasses.dataclass(frozen=True, kw_only=True)
class T5ExportRun(ExportRun):
    model_type: Literal["t5", "mt5"] = "t5"


@dataclasses.dataclass(frozen=True)
class T5ExportModel(ExportModel):
    written_by_conversion: ClassVar[str] = (
        "<train dir>/convert_nemo/results/megatron_t5.nemo, megatron_mt5.nemo for mT5"
    )


@dataclasses.dataclass(frozen=True)
class T5ExportConfig(StageSchema, stage=STAGE):
    run: T5ExportRun
    model: T5ExportModel
    triton_deployment: TritonDeployment  # tokens_to_generate: the longest answer decoded when a request does not say

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.model.checkpoint_path", self.model.checkpoint_path)]

    def writes(self) -> list[str]:
        return [self.run.results_dir, str(Path(self.triton_deployment.triton_model_dir).parent)]
