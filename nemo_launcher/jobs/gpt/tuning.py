"""GPT tuning on the trainer core: every method (fine-tuning, LoRA, prompt learning, adapters, IA3) starts here.

    job = GptTuning(cfg, stage, base_path, data, method)        # data: tuning_data.py; method: one of the methods
    return run_program(argv, prog, schema, job.recipe, build=job.build, module_class=job.module)

`build` loads the `.nemo` (resharded to this run's TP), lets the method change it (freeze the base, add its
parameters), and hands the chunk to the core's assemble_parts (megatron DDP, optimizer, schedules). The core runs
the Lightning loop: checkpoints of what trains, exact resume after kill -9, max_time, stop signals, self-requeue,
TensorBoard/W&B. The method writes its results once max_steps is reached (tuning/base.py's write_outputs).
"""
import dataclasses
import logging
from typing import Any, Dict, Optional

import torch

from ..common.config import JobConfigError
from ..core.recipe import Sequences
from ..tuning.base import Method, Tuning, TuningModule  # noqa: F401  (Method: the methods' base, here for them)

log = logging.getLogger(__name__)


class GptTuning(Tuning):
    """One GPT tuning run: the base `.nemo`, the data (tuning_data.py) and the method; the core calls
    recipe(), build() and module() in that order."""

    def __init__(self, cfg, stage: str, base_path: str, data, method: Method):
        self.cfg, self.stage, self.base_path, self.data, self.method = cfg, stage, base_path, data, method
        self.freezes_base = method.freezes_base
        self.num_workers = data.num_workers
        self.nemo_config: Dict[str, Any] = {}
        self.tokenizer = None
        self.model: Optional[torch.nn.Module] = None  # the bare GPTModel (state dicts, generation)

    # ---- what the core calls --------------------------------------------------------------------------
    def recipe(self, cfg):
        from .recipe import GPT

        self.method.base_step = GPT.forward_step
        return dataclasses.replace(GPT, forward_step=self.method.forward_step,
                                   sequences=lambda model: Sequences(self.data.max_seq_length), flops_per_token=None)

    def build(self, recipe, cfg, placement, on_gpu: bool, resume):
        from ..core.parts import assemble_parts

        model = self._load_base(on_gpu)
        self.method.attach(model, self)
        self.collate = self.data.collate(self.tokenizer)
        self.validation_sets = self.data.validation_sets(self.tokenizer) if cfg.trainer.limit_val_batches > 0 else ()
        if placement.rank == 0:
            print(self.method.describe(model), flush=True)

        def datasets(batches):
            size = batches.total_samples(cfg.trainer.max_steps)
            # The validation files go to the module through validation_sets; the core only asks whether there are any.
            return self.data.train_dataset(self.tokenizer, size, cfg.model.seed), self.validation_sets or None, None

        return assemble_parts(recipe, cfg, placement, on_gpu, False, self.tokenizer, self._vocab_rows, model.config, [model],
                              datasets, data_description=self.data.describe())

    def module(self, parts) -> TuningModule:
        return TuningModule(parts, self)

    # ---- Tuning ---------------------------------------------------------------------------------------
    def sharded_state(self) -> Dict[str, Any]:
        return self.method.sharded_state()

    def load_state(self, state: Dict[str, Any]) -> None:
        self.method.load_state(state)

    def validation_metrics(self, module: TuningModule) -> Dict[str, float]:
        return self.data.validation_metrics(self, module)

    def write_outputs(self, module: TuningModule) -> Dict[str, str]:
        self.model.eval()
        return self.method.write(module, self)

    # ---- the base model -------------------------------------------------------------------------------
    def _load_base(self, on_gpu: bool) -> torch.nn.Module:
        """The `.nemo`'s GPTModel for this rank (its TP shard), with this run's dropout, in training mode."""
        from megatron.core import parallel_state

        from ..common.config import bind
        from ..common.tokenizer import load_tokenizer
        from ...contract.schemas.gpt_training import ModelSection
        from ..core.nemo_archive import layout_of, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
        from ..core.shards import split_state_dict
        from .shards import gpt_shard_layout
        from .inference import build_inference_model, inference_section, load_gpt_nemo

        cfg, path = self.cfg, self.base_path
        tp = cfg.model.tensor_model_parallel_size
        self.nemo_config = read_nemo_config(path)
        section = bind(ModelSection, self.nemo_config, "model")
        section = dataclasses.replace(inference_section(section, tp, 1), hidden_dropout=cfg.model.hidden_dropout,
                                      attention_dropout=cfg.model.attention_dropout)
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
        self._check_lengths(section)
        self.model = model.train()
        return self.model

    def _check_lengths(self, section) -> None:
        if section.position_embedding_type == "learned_absolute" and self.data.max_seq_length > section.max_position_embeddings:
            raise JobConfigError(f"{self.data.length_key}: {self.data.max_seq_length} is longer than the model's "
                                 f"max_position_embeddings ({section.max_position_embeddings})")


class AllWeights(Method):
    """Supervised fine-tuning: every weight trains; the result is a whole GPT `.nemo` in the trained TP layout."""

    name = "fine-tuning (all weights)"
    freezes_base = False

    def __init__(self, output: str):
        self.output = output

    def attach(self, model: torch.nn.Module, job: "GptTuning") -> None:
        """Nothing to freeze and nothing to add: every weight of the loaded model trains as it is."""

    def write(self, module: TuningModule, job: "GptTuning") -> Dict[str, str]:
        from ..tuning.tuned_files import save_model

        save_model(job.model, job.nemo_config, self.output, job.stage, module.parts.placement)
        return {"fine-tuned model": self.output}
