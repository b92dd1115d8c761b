"""Sections and rules every conversion schema shares (gpt_conversion, t5_conversion, bert_conversion): a training
run's newest (or named) checkpoint becomes one `.nemo` file in a tensor/pipeline layout of the user's choice.

One job of TP x PP processes (the layout of the .nemo it writes) over run.nodes x run.ntasks_per_node; each
process reads its slice of the checkpoint.
"""

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

from ..binding import StageSchema, absolute_path_fields, config_fault, field_fault, positive_fields
from .run import RunBase


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConversionRunBase(RunBase):
    example_nemo: ClassVar[str] = "megatron_<family>.nemo"  # named in the message about nemo_file_name

    nodes: int = 1  # nodes of the job; the config derives it from TP x PP and cluster.gpus_per_node
    ntasks_per_node: int = 1  # processes per node
    nemo_file_name: str  # the .nemo goes to <results_dir>/results/<nemo_file_name>
    convert_name: str | None = None  # folder under the training run's directory
    model_train_name: str | None = None  # the training run converted
    train_dir: str | None = None  # that run's directory

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")
        if not self.nemo_file_name or "/" in self.nemo_file_name:
            raise field_fault(self, key, "nemo_file_name", f"a file name such as {self.example_nemo}")


@dataclasses.dataclass(frozen=True)
class CheckpointSourceBase:
    """Which checkpoint, in which layout, with which tokenizer files; a family adds its `model_type`."""

    checkpoint_folder: str  # the training run's checkpoints/ folder, or one step-<N> folder in it
    hparams_file: str  # the training job's resolved config (<train_dir>/<run.name>_hydra.yaml)
    checkpoint_name: str = "latest"  # latest: newest complete step-<N>; or a folder name such as step-40
    model_type: str = ""  # each family's schema narrows it to its own name(s)
    tensor_model_parallel_size: int = 1  # TP of the .nemo (and of this job)
    pipeline_model_parallel_size: int = 1  # PP of the .nemo
    model_parallel_size: int | None = None  # TP x PP, for the launcher's node count; checked if set
    vocab_file: str | None = None  # replaces model.tokenizer.vocab_file of training; null = as trained
    merge_file: str | None = None  # replaces model.tokenizer.merge_file
    tokenizer_model: str | None = None  # replaces model.tokenizer.model (SentencePiece or tokenizer.json)

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "pipeline_model_parallel_size")
        tp, pp = self.tensor_model_parallel_size, self.pipeline_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp * pp:
            raise field_fault(self, key, "model_parallel_size", f"must equal TP({tp}) x PP({pp}) = {tp * pp}")
        absolute_path_fields(self, key, "checkpoint_folder", "hparams_file")


def check_processes(run: ConversionRunBase, model: CheckpointSourceBase, key: str) -> None:
    """The job's processes hold the .nemo's TP x PP ranks evenly."""
    processes = run.nodes * run.ntasks_per_node
    tp, pp = model.tensor_model_parallel_size, model.pipeline_model_parallel_size
    if processes % (tp * pp):
        raise config_fault(
            f"{key}.run.ntasks_per_node",
            run.ntasks_per_node,
            f"nodes({run.nodes}) x ntasks_per_node({run.ntasks_per_node}) = {processes} processes "
            f"cannot hold TP({tp}) x PP({pp}) = {tp * pp} ranks evenly; make it a multiple",
        )


def check_no_merges(model: CheckpointSourceBase, key: str) -> None:
    """WordPiece and SentencePiece tokenizers (T5, mT5, BERT) have no merges file."""
    if model.merge_file is not None:
        raise field_fault(model, key, "merge_file", "WordPiece and SentencePiece have no merges file: set null")


def checkpoint_reads(model: CheckpointSourceBase, stage: str) -> list[tuple[str, str]]:
    return [
        (f"{stage}.model.checkpoint_folder", model.checkpoint_folder),
        (f"{stage}.model.hparams_file", model.hparams_file),
    ]


def nemo_path(run: ConversionRunBase) -> Path:
    return Path(run.results_dir) / "results" / run.nemo_file_name


@dataclasses.dataclass(frozen=True)
class HFSection:
    """The Hugging Face export of a conversion job, for every family that has one."""

    mode: Literal["auto", "required", "off"] = "auto"  # auto: export if an architecture matches, else say why
    output_dir: str | None = None  # null = <run.results_dir>/results/hf
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # null = the dtype the model was trained in


class ConversionStage(StageSchema, stage="conversion"):
    """What every family's conversion schema does alike (mixed into its frozen dataclass with `run`, `model` and
    `hf` fields): the process check, the checkpoint it reads, the .nemo and Hugging Face folder it writes."""

    def check(self, key: str) -> None:
        check_processes(self.run, self.model, key)

    def reads(self) -> list[tuple[str, str]]:
        return checkpoint_reads(self.model, "conversion")

    def writes(self) -> list[str]:
        return [self.run.results_dir, str(self.hf_dir)]

    @property
    def nemo_path(self) -> Path:
        return nemo_path(self.run)

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"
