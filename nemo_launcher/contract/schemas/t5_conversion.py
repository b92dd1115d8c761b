"""Schema of the resolved `conversion` section of the T5 family, T5 and mT5 (conf/conversion/t5/convert_t5.yaml,
conf/conversion/mt5/convert_mt5.yaml): a training checkpoint -> `<results_dir>/results/<nemo_file_name>`
(megatron_t5.nemo, megatron_mt5.nemo), resharded to the TP asked for, and a Hugging Face checkpoint where
T5ForConditionalGeneration / MT5ForConditionalGeneration computes the model exactly. The keys are every family's
(common_conversion), the pipeline split rank that T5 configs carry (a T5 .nemo has PP 1) and GPT's `hf` section.
"""

import dataclasses
from typing import ClassVar, Literal

from .common_conversion import CheckpointSourceBase, ConversionRunBase, ConversionStage, HFSection, check_no_merges
from .t5_training import check_no_pipeline_split


@dataclasses.dataclass(frozen=True, kw_only=True)
class T5ConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "megatron_t5.nemo"


@dataclasses.dataclass(frozen=True)
class T5ConversionModel(CheckpointSourceBase):
    model_type: Literal["t5"] = "t5"  # mT5 is a T5 with a SentencePiece vocabulary: t5 as well
    pipeline_model_parallel_split_rank: int | None = 0  # first decoder stage of a pipeline; 0 with PP 1

    def check(self, key: str) -> None:
        super().check(key)
        check_no_pipeline_split(self, key)
        check_no_merges(self, key)


@dataclasses.dataclass(frozen=True)
class T5ConversionConfig(ConversionStage):
    run: T5ConversionRun
    model: T5ConversionModel
    hf: HFSection = HFSection()  # mode auto | required | off, output_dir, dtype: as GPT's
