"""Schema of the resolved `conversion` section of the GPT family (conf/conversion/gpt3/convert_gpt3.yaml): the
shared conversion keys (common_conversion) and a Hugging Face export where an architecture matches.
"""

import dataclasses
from typing import ClassVar, Literal

from .common_conversion import CheckpointSourceBase, ConversionRunBase, ConversionStage, HFSection

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
class ConversionConfig(ConversionStage):
    run: ConversionRun
    model: ConversionModel
    hf: HFSection = HFSection()
