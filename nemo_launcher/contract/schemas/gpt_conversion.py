"""Schema of the resolved `conversion` section of the GPT family (conf/conversion/gpt3/convert_gpt3.yaml): the
shared conversion keys (common_conversion) and a Hugging Face export where an architecture matches.
"""
import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Optional, Tuple

from ..binding import bind_stage
from .common_conversion import CheckpointSourceBase, ConversionRunBase, check_processes, checkpoint_reads, nemo_path

STAGE = "conversion"
HF_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "megatron_gpt.nemo"

    nemo_file_name: str = "megatron_gpt.nemo"  # the .nemo goes to <results_dir>/results/<nemo_file_name>


@dataclasses.dataclass(frozen=True)
class ConversionModel(CheckpointSourceBase):
    model_type: Literal["gpt"] = "gpt"


@dataclasses.dataclass(frozen=True)
class HFSection:
    mode: Literal["auto", "required", "off"] = "auto"  # auto: export if an architecture matches, else say why
    output_dir: Optional[str] = None  # null = <run.results_dir>/results/hf
    dtype: Optional[Literal["float32", "bfloat16", "float16"]] = None  # null = the dtype the model was trained in


@dataclasses.dataclass(frozen=True)
class ConversionConfig:
    run: ConversionRun
    model: ConversionModel
    hf: HFSection = HFSection()

    def check(self, key: str) -> None:
        check_processes(self.run, self.model, key)

    def reads(self) -> List[Tuple[str, str]]:
        return checkpoint_reads(self.model, STAGE)

    def writes(self) -> List[str]:
        return [self.run.results_dir, str(self.hf_dir)]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "ConversionConfig":
        return bind_stage(cls, data, stage)

    @property
    def nemo_path(self) -> Path:
        return nemo_path(self.run)

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"
