"""Schema of `data_preparation=hf_model/<name>`: a tiny Hugging Face model made on this machine, the stand-in for a
downloaded checkpoint in the Llama quick start (conf/quickstart_llama.yaml) and wherever no network is.

    cfg = TinyHFModelConfig.from_dict(section)   # the launcher before submitting; the step when it starts
    cfg.steps()                                  # [StepPlan("tiny_hf_model")]: nemo_launcher.jobs.gpt.tiny_hf_model

The model is `transformers`' class for model_type, built from the sizes below with random weights (seeded), saved as
config.json + model.safetensors, with the repository's tiny GPT-2-format BPE as its tokenizer.json: what
conversion_hf2nemo imports, as it would a downloaded Llama.
"""

import dataclasses
from typing import Literal

from ..binding import field_fault, positive_fields
from .data_preparation import OneStepDataStage
from .run import RunBase

STAGE = "data_preparation"


@dataclasses.dataclass(frozen=True)
class TinyHFModelConfig(OneStepDataStage):
    step = "tiny_hf_model"
    run: RunBase
    output_dir: str  # the Hugging Face folder written: config.json, model.safetensors, tokenizer files
    vocab_file: str  # the tokenizer's GPT-2-format vocab.json (byte-level BPE) ...
    merge_file: str  # ... and its merges.txt, turned into the folder's tokenizer.json
    model_type: Literal["llama", "mistral", "qwen2", "mixtral"] = "llama"
    hidden_size: int = 64
    intermediate_size: int = 176  # SwiGLU's inner width
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # grouped-query attention
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    num_local_experts: int = 4  # mixtral only
    num_experts_per_tok: int = 2  # mixtral only
    seed: int = 0  # of the random weights

    def check(self, key: str) -> None:
        positive_fields(
            self,
            key,
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
            "num_local_experts",
            "num_experts_per_tok",
        )
        if self.hidden_size % self.num_attention_heads:
            raise field_fault(self, key, "hidden_size", "must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise field_fault(self, key, "num_key_value_heads", "must divide num_attention_heads")
        if self.num_experts_per_tok > self.num_local_experts:
            raise field_fault(self, key, "num_experts_per_tok", "must be at most num_local_experts")

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.vocab_file", self.vocab_file), (f"{STAGE}.merge_file", self.merge_file)]
