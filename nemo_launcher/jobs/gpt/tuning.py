"""GPT's tuning job on the tuning wing (tuning/job.py): GPT's recipe, its base model loaded from a `.nemo`
(resharded to this run's TP) and its greedy answers.

    # data: tuning/answer_data.py; method: one of the methods
    job = GptTuning(cfg, stage, base_path, data, method)
    return run_program(argv, prog, schema, job.recipe, build=job.build, module_class=job.module)
"""

import dataclasses
from functools import partial

import torch

from ...contract.model_facts import facts_of_model
from ...contract.model_rules import check_against_model
from ..core.recipe import Sequences
from ..tuning.job import TuningJob


class GptTuning(TuningJob):
    """One GPT tuning run: the base `.nemo`, the data and the method."""

    def recipe(self, cfg):
        from .recipe import GPT

        self.method.base_step = GPT.forward_step
        return dataclasses.replace(
            GPT,
            forward_step=self.method.forward_step,
            sequences=lambda model: Sequences(self.data.max_seq_length),
            flops_per_token=None,
        )

    def answer(self, prompt: list[int], tokens: int, sample=None) -> list[int]:
        from .generate import greedy_generate  # deferred with megatron-core

        tokenizer = self.tokenizer
        max_length = int(self.nemo_config.get("max_position_embeddings") or self.data.max_seq_length)
        prepare = None if sample is None else partial(self.method.before_generation, sample=sample)
        return greedy_generate(self.model, prompt, tokens, tokenizer.eod, tokenizer.vocab_size, max_length, prepare)

    def _load_base(self, on_gpu: bool) -> torch.nn.Module:
        """The `.nemo`'s GPTModel for this rank (its TP shard), with this run's dropout, in training mode."""
        from megatron.core import parallel_state

        from ...contract.schemas.gpt_training import ModelSection
        from ..common.config import bind
        from ..common.tokenizer import load_tokenizer
        from ..core.nemo_archive import layout_of, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
        from ..core.shards import split_state_dict
        from .inference import build_inference_model, inference_section, load_gpt_nemo
        from .shards import gpt_shard_layout

        cfg, path = self.cfg, self.base_path
        tp = cfg.model.tensor_model_parallel_size
        self.nemo_config = read_nemo_config(path)
        self._check_against_model()  # before any weight is read
        section = bind(ModelSection, self.nemo_config, "model")
        section = dataclasses.replace(
            inference_section(section, tp, 1),
            hidden_dropout=cfg.model.hidden_dropout,
            attention_dropout=cfg.model.attention_dropout,
        )
        spec = section.tokenizer
        self.tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        if layout_of(self.nemo_config) == (tp, 1):
            state_dict = load_nemo_shard(path, tp_rank, 0)
        else:  # an archive of another layout is merged and cut again for this TP (each rank reads it whole once)
            _, full = load_gpt_nemo(path)
            state_dict = split_state_dict(full, gpt_shard_layout(self.nemo_config, tp, 1), tp_rank, 0)
        self._vocab_rows = padded_vocab_of(state_dict, tp, self.tokenizer.vocab_size)
        model = build_inference_model(section, self._vocab_rows, cfg.trainer.precision_name())
        load_weights(model, state_dict, path)
        self.model = model.train()
        return self.model

    def _check_against_model(self) -> None:
        """The launcher's rules (contract/model_rules.py) against the model this job opened: the same code refused
        these settings at launch where the launcher could know the model, and holds a .nemo it could not read, or
        one replaced since, to them here (TP and heads, sequence lengths and positions, LoRA layers)."""
        facts = facts_of_model(self.nemo_config, str(self.base_path))
        check_against_model(facts, self.stage, dataclasses.asdict(self.cfg))
