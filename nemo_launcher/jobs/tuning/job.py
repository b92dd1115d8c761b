"""A tuning run on the trainer core, any family: every method (fine-tuning, LoRA, prompt learning, adapters, IA3)
starts here. A family's job (gpt/tuning.py's GptTuning, t5/prompt_tuning.py's T5Tuning) subclasses TuningJob with
its recipe(), its _load_base() and its answer().

    job = GptTuning(cfg, stage, base_path, data, method)        # data: answer_data.py; method: one of the methods
    return run_program(argv, prog, schema, job.recipe, build=job.build, module_class=job.module)

`build` loads the `.nemo` (resharded to this run's TP), lets the method change it (freeze the base, add its
parameters), and hands the chunk to the core's assemble_parts (megatron DDP, optimizer, schedules). The core runs
the Lightning loop: checkpoints of what trains, exact resume after kill -9, max_time, stop signals, self-requeue,
TensorBoard/W&B. The method writes its results once max_steps is reached (tuning/base.py's write_outputs).
"""

import logging
from types import SimpleNamespace
from typing import Any

import torch

from ..core.parts import assemble_parts
from ..core.program import run_program
from .base import Method, Tuning, TuningModule
from .tuned_files import save_model

log = logging.getLogger(__name__)


class TuningJob(Tuning):
    """One tuning run: the base `.nemo`, the data (answer_data.py, prompt_data.py) and the method; the core calls
    recipe(), build() and module() in that order. The family's subclass provides recipe() (its recipe with the
    method's forward step), _load_base(on_gpu) (the base model of this rank, setting tokenizer, nemo_config and
    _vocab_rows) and answer() (greedy answer ids, for the exact-match validation)."""

    def __init__(self, cfg, stage: str, base_path: str, data, method: Method):
        self.cfg, self.stage, self.base_path, self.data, self.method = cfg, stage, base_path, data, method
        self.freezes_base = method.freezes_base
        self.num_workers = data.num_workers
        self.nemo_config: dict[str, Any] = {}
        self.tokenizer = None
        self.model: torch.nn.Module | None = None  # the bare base model (state dicts, generation)

    # ---- what the core calls --------------------------------------------------------------------------
    def recipe(self, cfg):
        raise NotImplementedError(f"{type(self).__name__} gives no recipe")

    def _load_base(self, on_gpu: bool) -> torch.nn.Module:
        raise NotImplementedError(f"{type(self).__name__} loads no base model")

    def answer(self, prompt: list[int], tokens: int, sample=None) -> list[int]:
        """Greedy answer ids (at most `tokens`) to one prompt; `sample`: the method's view of it, if any."""
        raise NotImplementedError(f"{type(self).__name__} generates no answers")

    def build(self, recipe, cfg, placement, on_gpu: bool, resume):
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

        return assemble_parts(
            recipe,
            cfg,
            placement,
            on_gpu,
            False,
            self.tokenizer,
            self._vocab_rows,
            model.config,
            [model],
            datasets,
            data_description=self.data.describe(),
        )

    def module(self, parts) -> TuningModule:
        return TuningModule(parts, self)

    # ---- Tuning ---------------------------------------------------------------------------------------
    def sharded_state(self) -> dict[str, Any]:
        return self.method.sharded_state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.method.load_state(state)

    def validation_metrics(self, module: TuningModule) -> dict[str, float]:
        return self.data.validation_metrics(self, module)

    def write_outputs(self, module: TuningModule) -> dict[str, str]:
        self.model.eval()
        return self.method.write(module, self)


class AllWeights(Method):
    """Supervised fine-tuning: every weight trains; the result is a whole `.nemo` in the trained TP layout."""

    name = "fine-tuning (all weights)"
    freezes_base = False

    def __init__(self, output: str):
        self.output = output

    def attach(self, model: torch.nn.Module, job: "TuningJob") -> None:
        """Nothing to freeze and nothing to add: every weight of the loaded model trains as it is."""

    def write(self, module: TuningModule, job: "TuningJob") -> dict[str, str]:
        save_model(job.model, job.nemo_config, self.output, job.stage, module.parts.placement)
        return {"fine-tuned model": self.output}


def run_sft(argv, stage: str, prog: str, make_job) -> int:
    """The fine_tuning and peft programs of every family: bind the section to SftConfig, build the family's
    tuning job (make_job(cfg, stage)), run the core."""
    from ...contract.schemas.gpt_sft import SftConfig

    def bind_job(section):
        cfg = SftConfig.from_dict(section, stage=stage)
        return cfg, make_job(cfg, stage)

    return run_tuning_program(argv, prog, bind_job)


def run_tuning_program(argv, prog: str, bind_job) -> int:
    """A tuning program on the trainer core: bind_job(section) -> (bound config, the family's tuning job, which gives
    the core its recipe(), build() and module()). The core binds the config first, so the job is made then."""
    jobs = {}

    def bind(section):
        cfg, jobs["job"] = bind_job(section)
        return cfg

    return run_program(
        argv,
        prog,
        SimpleNamespace(from_dict=bind),
        lambda cfg: jobs["job"].recipe(cfg),
        build=lambda *args: jobs["job"].build(*args),
        module_class=lambda parts: jobs["job"].module(parts),
    )
