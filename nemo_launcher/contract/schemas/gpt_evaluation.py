"""Schema of the resolved `evaluation` section of the GPT family (conf/evaluation/gpt3/*.yaml).

One job of TP processes over run.nodes x run.ntasks_per_node; tasks are lm-eval's, read from local files
(`nemo_launcher/contract/eval_tasks.py`).
"""

import dataclasses
from pathlib import Path
from typing import Literal

from ..binding import (
    StageSchema,
    absolute_path_fields,
    field_fault,
    no_pipeline_parallel,
    non_negative_fields,
    positive,
    positive_fields,
)
from ..eval_tasks import EVAL_TASKS, parse_tasks
from .common_training import StoredPrecision, check_model_copies
from .run import RunBase

STAGE = "evaluation"
RESULTS_FILE = "lm_eval_results.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationRun(RunBase):
    task_data_dir: str  # <task>/<split>.jsonl per task
    tasks: str | list[str] = "all_tasks"  # all_tasks, a name, a comma-separated string or a list
    nodes: int = 1  # the config derives it from TP and cluster.gpus_per_node
    ntasks_per_node: int = 1
    prepare_sample_data: bool = False  # first write smoke-test lambada/wikitext files from local text
    eval_name: str | None = None  # folder under the training run's directory
    model_train_name: str | None = None  # the training run whose converted model is evaluated
    train_dir: str | None = None

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")
        try:
            parse_tasks(self.tasks)
        except ValueError as error:
            raise field_fault(self, key, "tasks", str(error)) from None
        absolute_path_fields(self, key, "task_data_dir")

    def task_names(self) -> list[str]:
        return parse_tasks(self.tasks)


@dataclasses.dataclass(frozen=True)
class EvaluationModel(StoredPrecision):
    nemo_model: str  # the .nemo to evaluate (the conversion stage's output by default)
    model_type: Literal["nemo-gpt3"] = "nemo-gpt3"
    tensor_model_parallel_size: int = 1  # processes the model is split over; the .nemo is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    model_parallel_size: int | None = None  # TP x PP, for the launcher's node count
    precision: Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32] | None = (
        None  # null = as stored
    )
    eval_batch_size: int = 4  # sequences per forward pass
    num_fewshot: int = 0  # examples drawn from the task's own split and put before each question
    limit: int | None = None  # documents per task, for a quick look; null = all
    bootstrap_iters: int = 1000  # resamples for the standard errors; 0 skips them

    def check(self, key: str) -> None:
        no_pipeline_parallel(
            self, key, "evaluation runs without pipeline parallelism: set 1 (the .nemo is resharded on load)"
        )
        positive_fields(self, key, "tensor_model_parallel_size", "eval_batch_size")
        tp = self.tensor_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp:
            raise field_fault(self, key, "model_parallel_size", f"must equal TP({tp}) x PP(1) = {tp}")
        non_negative_fields(self, key, "num_fewshot", "bootstrap_iters")
        if self.limit is not None:
            positive(f"{key}.limit", self.limit)
        absolute_path_fields(self, key, "nemo_model")


@dataclasses.dataclass(frozen=True)
class EvaluationConfig(StageSchema, stage=STAGE):
    run: EvaluationRun
    model: EvaluationModel

    def check(self, key: str) -> None:
        check_model_copies(self.run, self.model.tensor_model_parallel_size, key)

    def reads(self) -> list[tuple[str, str]]:
        paths = [(f"{STAGE}.model.nemo_model", self.model.nemo_model)]
        if not self.run.prepare_sample_data:  # else this job writes the task files itself first
            paths += [
                (f"{STAGE}.run.task_data_dir", f"{self.run.task_data_dir}/{EVAL_TASKS[name].data_file(name)}")
                for name in self.run.task_names()
            ]
        return paths

    def writes(self) -> list[str]:
        return [self.run.results_dir] + ([self.run.task_data_dir] if self.run.prepare_sample_data else [])

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program, run first: smoke-test task files made from local text,
        for machines that cannot fetch the real task data. None: the task files are there already."""
        return ("--task-data-dir", self.run.task_data_dir) if self.run.prepare_sample_data else None

    @property
    def results_file(self) -> Path:
        return Path(self.run.results_dir) / "results" / RESULTS_FILE
