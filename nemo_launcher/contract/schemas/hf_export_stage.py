"""Schema of the resolved `conversion_nemo2hf` section (conf/conversion_nemo2hf/<family>/<name>.yaml): a GPT `.nemo`
(an import, a fine-tuned model, a merged LoRA) -> a Hugging Face folder that `transformers` loads as the class
computing the same logits (jobs/gpt/nemo_to_hf.py: Llama, Qwen2, Mixtral or GPT-2).

    cfg = NemoToHFConfig.from_dict(section)   # the launcher before submitting; the job when it starts

One process on the CPU: the .nemo's shards are merged whatever TP/PP it was written at.
"""

import dataclasses
from typing import ClassVar, Literal

from ..binding import StageSchema, absolute_path_fields, field_fault
from .run import OneProcessRun

STAGE = "conversion_nemo2hf"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NemoToHFRun(OneProcessRun):
    one_process_fix: ClassVar[str] = "the export merges the .nemo's shards in one process: set 1"


@dataclasses.dataclass(frozen=True)
class NemoToHFModel:
    nemo_file: str  # the .nemo to export (absolute path)
    output_dir: str  # the Hugging Face folder written: config.json, model.safetensors, tokenizer files
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # of the written weights; null = as stored

    def check(self, key: str) -> None:
        absolute_path_fields(self, key, "nemo_file", "output_dir")
        if not self.nemo_file.endswith(".nemo"):
            raise field_fault(self, key, "nemo_file", "name a .nemo file (conversion, fine-tuning or a merged LoRA)")


@dataclasses.dataclass(frozen=True)
class NemoToHFConfig(StageSchema, stage=STAGE):
    run: NemoToHFRun
    model: NemoToHFModel

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.model.nemo_file", self.model.nemo_file)]

    def writes(self) -> list[str]:
        return [self.run.results_dir, self.model.output_dir]
