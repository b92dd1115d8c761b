"""Schema of the resolved `evaluation` section of the GPT family (conf/evaluation/gpt3/*.yaml).

One job of TP processes over run.nodes x run.ntasks_per_node; tasks are lm-eval's, read from local files
(`nemo_launcher/contract/eval_tasks.py`). The model is a `.nemo` (model.nemo_model), or a training checkpoint
(model.checkpoint_folder, as the seed's BCP command evaluates): the same job then first runs the family's
conversion program on it (`conversion_section()`) and evaluates the `.nemo` that writes.
"""

import dataclasses
from pathlib import Path, PurePosixPath
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
CONVERTED = "converted"  # <run.results_dir>/converted: the conversion of a checkpoint_folder, run by this job
CONVERTED_NEMO = "megatron_gpt.nemo"
# Where our training keeps its checkpoints under its run folder (conf/training: <train_dir>/results/checkpoints).
CHECKPOINTS_UNDER_RUN = ("results", "checkpoints")


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
    nemo_model: str | None = None  # the .nemo to evaluate (the conversion stage's output by default)
    # Or a training checkpoint (its checkpoints/ folder or one step-<N> folder in it), converted by this job first;
    # set, it is what is evaluated and nemo_model is not read.
    checkpoint_folder: str | None = None
    checkpoint_name: str = "latest"  # latest: the newest complete step-<N>; or a folder name such as step-2000
    # The training job's resolved config; null: <run folder>/<run folder name>_hydra.yaml for a checkpoint_folder
    # of the form <run folder>/results/checkpoints[/step-<N>], where training writes it.
    hparams_file: str | None = None
    vocab_file: str | None = None  # tokenizer files replacing the training's, for a checkpoint_folder
    merge_file: str | None = None
    tokenizer_model: str | None = None
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
        if self.checkpoint_folder is None and self.nemo_model is None:
            raise field_fault(
                self, key, "nemo_model", "name the model: a .nemo here, or a training checkpoint in checkpoint_folder"
            )
        absolute_path_fields(
            self, key, "nemo_model", "checkpoint_folder", "hparams_file", "vocab_file", "merge_file", "tokenizer_model"
        )
        if self.checkpoint_folder is not None and self.training_config() is None:
            raise field_fault(
                self,
                key,
                "hparams_file",
                f"checkpoint_folder is not <run folder>/{'/'.join(CHECKPOINTS_UNDER_RUN)}[/step-<N>]: name the "
                "training job's <run.name>_hydra.yaml here",
            )

    def training_config(self) -> str | None:
        """The training job's resolved config for a checkpoint_folder: hparams_file, or the one training writes."""
        if self.hparams_file is not None or self.checkpoint_folder is None:
            return self.hparams_file
        folder = PurePosixPath(self.checkpoint_folder)
        if folder.name.startswith("step-"):
            folder = folder.parent
        if folder.parts[-2:] != CHECKPOINTS_UNDER_RUN or len(folder.parts) < 4:
            return None
        run_folder = folder.parent.parent
        return str(run_folder / f"{run_folder.name}_hydra.yaml")


@dataclasses.dataclass(frozen=True)
class EvaluationConfig(StageSchema, stage=STAGE):
    run: EvaluationRun
    model: EvaluationModel

    def check(self, key: str) -> None:
        check_model_copies(self.run, self.model.tensor_model_parallel_size, key)

    def reads(self) -> list[tuple[str, str]]:
        model = self.model
        if model.checkpoint_folder is None:
            paths = [(f"{STAGE}.model.nemo_model", model.nemo_model)]
        else:
            paths = [
                (f"{STAGE}.model.checkpoint_folder", model.checkpoint_folder),
                (f"{STAGE}.model.hparams_file", model.training_config()),
            ] + [
                (f"{STAGE}.model.{name}", getattr(model, name))
                for name in ("vocab_file", "merge_file", "tokenizer_model")
                if getattr(model, name) is not None
            ]
        if not self.run.prepare_sample_data:  # else this job writes the task files itself first
            paths += [
                (f"{STAGE}.run.task_data_dir", f"{self.run.task_data_dir}/{EVAL_TASKS[name].data_file(name)}")
                for name in self.run.task_names()
            ]
        return paths

    @property
    def evaluated_nemo(self) -> str:
        """The .nemo the evaluation loads: model.nemo_model, or the conversion of model.checkpoint_folder."""
        if self.model.checkpoint_folder is None:
            return self.model.nemo_model
        return str(Path(self.run.results_dir) / CONVERTED / "results" / CONVERTED_NEMO)

    def conversion_section(self) -> dict | None:
        """The family conversion program's section that turns model.checkpoint_folder into `evaluated_nemo`, in
        this job's processes (TP ranks); None when the model is a .nemo already."""
        model = self.model
        if model.checkpoint_folder is None:
            return None
        tp = model.tensor_model_parallel_size
        return {
            "run": {
                "name": f"{self.run.name}_{CONVERTED}",
                "results_dir": str(Path(self.run.results_dir) / CONVERTED),
                "time_limit": str(self.run.time_limit),
                "nodes": self.run.nodes,
                "ntasks_per_node": self.run.ntasks_per_node,
                "nemo_file_name": CONVERTED_NEMO,
            },
            "model": {
                "model_type": "gpt",
                "checkpoint_folder": model.checkpoint_folder,
                "checkpoint_name": model.checkpoint_name,
                "hparams_file": model.training_config(),
                "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": 1,
                "model_parallel_size": tp,
                "vocab_file": model.vocab_file,
                "merge_file": model.merge_file,
                "tokenizer_model": model.tokenizer_model,
            },
            "hf": {"mode": "off"},
        }

    def writes(self) -> list[str]:
        return [self.run.results_dir] + ([self.run.task_data_dir] if self.run.prepare_sample_data else [])

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program, run first: smoke-test task files made from local text,
        for machines that cannot fetch the real task data. None: the task files are there already."""
        return ("--task-data-dir", self.run.task_data_dir) if self.run.prepare_sample_data else None

    @property
    def results_file(self) -> Path:
        return Path(self.run.results_dir) / "results" / RESULTS_FILE
