"""Schema of the resolved `conversion` section of the T5 family, T5 and mT5 (conf/conversion/t5/convert_t5.yaml,
conf/conversion/mt5/convert_mt5.yaml): a training checkpoint -> `<results_dir>/results/<nemo_file_name>`
(megatron_t5.nemo, megatron_mt5.nemo), resharded to the TP asked for, and a Hugging Face checkpoint where
T5ForConditionalGeneration / MT5ForConditionalGeneration computes the model exactly. The keys are every family's
(common_conversion), the pipeline split rank that T5 configs carry (a T5 .nemo has PP 1) and GPT's `hf` section.
"""
import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Optional, Tuple

from ..binding import bind_stage
from .common_conversion import (CheckpointSourceBase, ConversionRunBase, check_no_merges, check_processes, checkpoint_reads,
                                nemo_path)
from .gpt_conversion import HFSection
from .t5_training import check_no_pipeline_split

STAGE = "conversion"


@dataclasses.dataclass(frozen=True, kw_only=True)
class T5ConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "megatron_t5.nemo"


@dataclasses.dataclass(frozen=True)
class T5ConversionModel(CheckpointSourceBase):
    model_type: Literal["t5"] = "t5"  # mT5 is a T5 with a SentencePiece vocabulary: t5 as well
    pipeline_model_parallel_split_rank: Optional[int] = 0  # first decoder stage of a pipeline; 0 with PP 1

    def check(self, key: str) -> None:
        super().check(key)
        check_no_pipeline_split(self, key)
        check_no_merges(self, key)


@dataclasses.dataclass(frozen=True)
class T5ConversionConfig:
    run: T5ConversionRun
    model: T5ConversionModel
    hf: HFSection = HFSection()  # mode auto | required | off, output_dir, dtype: as GPT's

    def check(self, key: str) -> None:
        check_processes(self.run, self.model, key)

    def reads(self) -> List[Tuple[str, str]]:
        return checkpoint_reads(self.model, STAGE)

    def writes(self) -> List[str]:
        return [self.run.results_dir, str(self.hf_dir)]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "T5ConversionConfig":
        return bind_stage(cls, data, stage)

    @property
    def nemo_path(self) -> Path:
        return nemo_path(self.run)

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"
