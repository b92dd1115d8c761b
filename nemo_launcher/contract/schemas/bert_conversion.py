"""Schema of the resolved `conversion` section of the BERT family (conf/conversion/bert/convert_bert.yaml): a
training checkpoint -> `<results_dir>/results/<nemo_file_name>` (megatron_bert.nemo) in the TP x PP layout asked
for, and a Hugging Face checkpoint where one computes the model exactly (`hf`, as for GPT: transformers'
MegatronBert classes, for gelu with learned absolute positions). The keys are every family's (common_conversion).
"""
import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Tuple

from ..binding import bind_stage, config_fault
from .common_conversion import CheckpointSourceBase, ConversionRunBase, check_no_merges, check_processes, checkpoint_reads, nemo_path
from .gpt_conversion import HFSection  # one definition of the Hugging Face export keys for every family that has one

STAGE = "conversion"


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
            raise config_fault(f"{key}.tokenizer_model", self.tokenizer_model,
                               "BERT reads a WordPiece vocabulary: replace it with vocab_file, or set null")


@dataclasses.dataclass(frozen=True)
class BertConversionConfig:
    run: BertConversionRun
    model: BertConversionModel
    hf: HFSection = HFSection()

    def check(self, key: str) -> None:
        check_processes(self.run, self.model, key)

    def reads(self) -> List[Tuple[str, str]]:
        return checkpoint_reads(self.model, STAGE)

    def writes(self) -> List[str]:
        return [self.run.results_dir, str(self.hf_dir)]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "BertConversionConfig":
        return bind_stage(cls, data, stage)

    @property
    def nemo_path(self) -> Path:
        return nemo_path(self.run)

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"
