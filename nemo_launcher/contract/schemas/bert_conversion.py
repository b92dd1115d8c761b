"""Schema of the resolved `conversion` section of the BERT family (conf/conversion/bert/convert_bert.yaml): a
training checkpoint -> `<results_dir>/results/<nemo_file_name>` (megatron_bert.nemo) in the TP x PP layout asked
for, and a Hugging Face checkpoint where one computes the model exactly (`hf`, as for GPT: transformers'
MegatronBert classes, for gelu with learned absolute positions). The keys are every family's (common_conversion).
"""

import dataclasses
from typing import ClassVar, Literal

from ..binding import field_fault
from .common_conversion import CheckpointSourceBase, ConversionRunBase, ConversionStage, HFSection, check_no_merges


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertConversionRun(ConversionRunBase):
    example_nemo: ClassVar[str] = "megatron_bert.nemo"


@dataclasses.dataclass(frozen=True)
class BertConversionModel(CheckpointSourceBase):
    model_type: Literal["bert"] = "bert"

    def check(self, key: str) -> None:
        super().check(key)
        check_no_merges(self, key)
        if self.tokenizer_model is not None:
            raise field_fault(
                self,
                key,
                "tokenizer_model",
                "BERT reads a WordPiece vocabulary: replace it with vocab_file, or set null",
            )


@dataclasses.dataclass(frozen=True)
class BertConversionConfig(ConversionStage):
    run: BertConversionRun
    model: BertConversionModel
    hf: HFSection = HFSection()
