"""Schema of the resolved `evaluation` section of the T5 family, T5 and mT5 (conf/evaluation/t5/squad.yaml,
conf/evaluation/mt5/xquad.yaml): a fine-tuned `.nemo` answers the questions of each validation source file
(greedy decoding, at most max_tgt_seq_length tokens) and is scored against the target file.

    cfg = QaEvaluationConfig.from_dict(section, "evaluation")

One job of TP processes over run.nodes x run.ntasks_per_node. It writes `<run.results_dir>/results/<RESULTS_FILE>`:

    {"<name of a file pair>": {"exact_match": <% of answers equal to the target>, "f1": <mean token F1, %>,
                               "examples": <count>}, ..., "average": {...}}

with validation_ds.metric.name squad: both after SQuAD's answer normalisation (lower case, no punctuation, no
articles a/an/the, single spaces), each question scored against its best accepted answer (answers_file_name, else
the target line); with exact_string_match: {"exact_string_match": %, "examples": n}. "average" pools the files as
metric.average says. Predictions go to `<run.results_dir>/results/<name>_predictions.jsonl`. With a
`squad_preparation` list the text pairs are first written from SQuAD-format JSON, as for fine-tuning.
"""

import dataclasses
from pathlib import Path
from typing import Literal

from ..binding import StageSchema, absolute_path_fields, config_fault, field_fault, positive_fields
from .common_training import StoredPrecision, check_model_copies
from .run import RunBase
from .t5_finetuning import QaToText, TextPairFiles, check_preparation, prepared_reads, prepared_writes
from .t5_training import check_no_pipeline_split

STAGE = "evaluation"
RESULTS_FILE = "qa_metrics.json"
PREDICTIONS_SUFFIX = "_predictions.jsonl"  # one file per pair: {"source", "prediction", "answers"} per line


@dataclasses.dataclass(frozen=True, kw_only=True)
class QaEvaluationRun(RunBase):
    task_name: str  # the fine-tuning task evaluated (squad, xquad); names the job and its folder
    nodes: int = 1  # the config derives it from TP and cluster.gpus_per_node
    ntasks_per_node: int = 1
    model_train_name: str | None = None  # the pre-training run the fine-tuned model came from
    fine_tuning_results_dir: str | None = None  # that fine-tuning run's directory

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")


@dataclasses.dataclass(frozen=True)
class QaEvaluationData:
    validation_ds: TextPairFiles  # each file pair is scored on its own (names label them in the results)

    def check(self, key: str) -> None:
        if self.validation_ds.concat_sampling_probabilities is not None:
            raise config_fault(
                f"{key}.validation_ds.concat_sampling_probabilities",
                self.validation_ds.concat_sampling_probabilities,
                "evaluation reads every file pair whole: set null",
            )


@dataclasses.dataclass(frozen=True)
class QaEvaluationModel(StoredPrecision):
    restore_from_path: (
        str  # the fine-tuned .nemo (the fine-tuning stage writes <its results_dir>/results/checkpoints/<name>.nemo)
    )
    data: QaEvaluationData
    tensor_model_parallel_size: int = 1  # processes the model is split over; the .nemo is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1 (megatron-core has no T5 pipeline split)
    pipeline_model_parallel_split_rank: int | None = 0  # 0 with PP 1
    model_parallel_size: int | None = None  # TP x PP, for the launcher's node count; checked if set
    precision: Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32] | None = (
        None  # null = as stored
    )
    eval_batch_size: int = 16  # questions per forward pass

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "eval_batch_size")
        check_no_pipeline_split(self, key)
        tp = self.tensor_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp:
            raise field_fault(self, key, "model_parallel_size", f"must equal TP({tp}) x PP(1) = {tp}")
        absolute_path_fields(self, key, "restore_from_path", fix="must be an absolute path to the fine-tuned .nemo")


@dataclasses.dataclass(frozen=True)
class QaEvaluationConfig(StageSchema, stage=STAGE):
    run: QaEvaluationRun
    model: QaEvaluationModel
    squad_preparation: list[QaToText] | None = None  # SQuAD-format JSON -> text pairs, before evaluating

    def check(self, key: str) -> None:
        check_preparation(self.squad_preparation, key)
        check_model_copies(self.run, self.model.tensor_model_parallel_size, key)

    def reads(self) -> list[tuple[str, str]]:
        paths = [(f"{STAGE}.model.restore_from_path", self.model.restore_from_path)]
        paths += self.model.data.validation_ds.files(f"{STAGE}.model.data.validation_ds")
        return paths + prepared_reads(self.squad_preparation, STAGE)

    def writes(self) -> list[str]:
        return [self.run.results_dir] + prepared_writes(self.squad_preparation)

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program (SQuAD JSON -> text pairs); None: nothing to prepare."""
        return ("--config", config_file) if self.squad_preparation else None

    @property
    def results_file(self) -> Path:
        return Path(self.run.results_dir) / "results" / RESULTS_FILE

    def predictions_file(self, name: str) -> Path:
        return Path(self.run.results_dir) / "results" / f"{name}{PREDICTIONS_SUFFIX}"
