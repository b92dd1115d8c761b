"""Prompt learning (p-tuning, prompt tuning), Houlsby adapters and IA3 on a frozen T5 or mT5 `.nemo`, on the
trainer core.

    python3 -u -m nemo_launcher.jobs.t5.prompt_learning --config <job dir>/<run.name>_hydra.yaml
    python3 -u -m nemo_launcher.jobs.t5.adapter_learning --config ...
    python3 -u -m nemo_launcher.jobs.t5.ia3_learning --config ...

The section and the methods are GPT's (schema gpt_prompt_learning, tuning/peft_methods.py); what is T5's is the
frozen base (t5/tuning.load_base_model: any TP the heads allow, resharded on load), its samples (prompt_data.py)
and its forward step. Virtual tokens replace placeholders in the encoder's input; adapters and IA3 vectors sit in
the encoder's and the decoder's layers (IA3 scales the cross-attention's keys and values too). At the last step
model.nemo_path gets the method's tensors (megatron_t5_prompt.nemo, megatron_mt5_prompt.nemo,
megatron_t5_adapter.nemo, megatron_t5_ia3.nemo), which evaluation=prompt_t5/squad (...) reads beside the base.
"""

import dataclasses

import torch

from ..common.config import JobConfigError
from ..core.recipe import Sequences
from ..tuning.job import TuningJob

PROGRAMS = {
    stage: f"python3 -m nemo_launcher.jobs.t5.{stage}"
    for stage in ("prompt_learning", "adapter_learning", "ia3_learning")
}


class T5Tuning(TuningJob):
    """The tuning job (tuning/job.py: build, checkpoints, results) around a T5Model."""

    base_key = "model.language_model_path"  # the key naming the base .nemo, for errors

    def recipe(self, cfg):
        from .recipe import T5

        self.method.base_step = T5.forward_step
        length = self.data.max_seq_length
        return dataclasses.replace(
            T5,
            forward_step=self.method.forward_step,
            sequences=lambda model: Sequences(length, length),
            flops_per_token=None,
            summary_items=lambda cfg, outcome: [("base model", self.base_path)],
        )

    def _load_base(self, on_gpu: bool) -> torch.nn.Module:
        from .tuning import check_cpu_precision, load_base_model

        cfg = self.cfg
        m = cfg.model
        check_cpu_precision(cfg.trainer)
        model, self.nemo_config, self.tokenizer = load_base_model(
            self.base_path,
            m.tensor_model_parallel_size,
            (m.hidden_dropout, m.attention_dropout),
            cfg.trainer.precision_name(),
            key=f"{self.stage}.{self.base_key}",
        )
        self._vocab_rows = model.embedding.word_embeddings.weight.shape[0] * m.tensor_model_parallel_size
        positions = self.nemo_config.get("max_position_embeddings")
        if (
            self.nemo_config.get("position_embedding_type", "learned_absolute") == "learned_absolute"
            and self.data.max_seq_length > positions
        ):
            raise JobConfigError(
                f"{self.data.length_key}: {self.data.max_seq_length} is longer than the model's "
                f"max_position_embeddings ({positions}); lower it"
            )
        self.model = model
        return model


def run(argv, stage: str) -> int:
    from ..tuning.peft_methods import run_method
    from .prompt_data import T5PromptData

    return run_method(argv, stage, PROGRAMS[stage], T5Tuning, T5PromptData)
