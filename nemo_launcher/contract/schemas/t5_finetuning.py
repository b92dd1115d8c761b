"""Schema of the resolved `fine_tuning` section of the T5 family, T5 and mT5 (conf/_family/t5_finetuning.yaml):
every weight of a converted `.nemo` tuned on source/target text pairs.

    cfg = T5FinetuneConfig.from_dict(section, "fine_tuning")

Data are plain text files read line by line: line i of a target file is the answer to line i of its source
file. With a `squad_preparation` list the job first writes such pairs from SQuAD v1.1-format JSON (SQuAD,
XQuAD): the family's preparation program, one process, before the trainer starts. The architecture comes from
the `.nemo`, so only the batch arithmetic of the layout is checked at bind.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, fraction, positive_fields
from .common_training import OptimSection
from .common_tuning import FinetuningStage, SquadSource
from .t5_training import check_no_pipeline_split

STAGE = "fine_tuning"
NEMO_HINT = "the conversion stage writes <train dir>/convert_nemo/results/megatron_t5.nemo (megatron_mt5.nemo for mT5)"


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


@dataclasses.dataclass(frozen=True)
class TextPairMetric:
    # exact_string_match: % of greedy answers equal to the target (surrounding spaces stripped). squad: SQuAD's exact
    # match and F1 after its answer normalisation, each question scored against its best accepted answer
    # (answers_file_name, else the target).
    name: Literal["exact_string_match", "squad"] = "exact_string_match"
    # Several validation files: micro pools every example into one score, macro (and null) averages the files'.
    average: Literal["micro", "macro"] | None = None
    num_classes: int | None = None  # for classification metrics, which this job has none of: must stay null

    def check(self, key: str) -> None:
        if self.num_classes is not None:
            raise field_fault(
                self, key, "num_classes", "exact_string_match compares whole strings and has no classes: set null"
            )


@dataclasses.dataclass(frozen=True)
class TextPairFiles:
    src_file_name: str | list[str]  # text files, one source per line
    tgt_file_name: str | list[str]  # text files, line i the target of line i of the matching source file
    # One file per pair whose line i is a JSON list of every accepted answer of source line i (squad_preparation
    # writes them): SQuAD scores take the best over them. null: the target line is the only answer.
    answers_file_name: str | list[str] | None = None
    names: list[str] | None = None  # a label per file pair for the logs and results; null = the file names
    concat_sampling_probabilities: list[float] | None = None  # training on several pairs: one per pair, summing to 1
    max_src_seq_length: int = 512  # source tokens the encoder reads; longer sources lose their end
    max_tgt_seq_length: int = 128  # target tokens (with eos) learned, and the longest answer generated
    num_workers: int = 0  # DataLoader worker processes per rank
    metric: TextPairMetric = TextPairMetric()

    def sources(self) -> list[str]:
        return _as_list(self.src_file_name)

    def targets(self) -> list[str]:
        return _as_list(self.tgt_file_name)

    def answers(self) -> list[str | None]:
        """The answers file of each pair (None where the target is the only answer)."""
        return [None] * len(self.sources()) if self.answers_file_name is None else _as_list(self.answers_file_name)

    def check(self, key: str) -> None:
        sources, targets = self.sources(), self.targets()
        for name, files in (("src_file_name", sources), ("tgt_file_name", targets)):
            if not files or not all(files):
                raise config_fault(
                    f"{key}.{name}", getattr(self, name), "name one or more text files, e.g. [/data/train_src.txt]"
                )
        if len(sources) != len(targets):
            raise field_fault(
                self, key, "tgt_file_name", f"give one target file per source file ({len(sources)} source files)"
            )
        if self.answers_file_name is not None and len(self.answers()) != len(sources):
            raise field_fault(
                self,
                key,
                "answers_file_name",
                f"give one answers file per source file ({len(sources)} source files), or null",
            )
        if self.names is not None and len(self.names) != len(sources):
            raise field_fault(self, key, "names", f"give one name per file pair ({len(sources)} pairs)")
        weights = self.concat_sampling_probabilities
        if weights is not None and (
            len(weights) != len(sources) or any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6
        ):
            raise config_fault(
                f"{key}.concat_sampling_probabilities",
                weights,
                f"give one probability >= 0 per file pair ({len(sources)} pairs), summing to 1",
            )
        positive_fields(self, key, "max_src_seq_length", "max_tgt_seq_length")
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")

    def files(self, key: str) -> list[tuple[str, str]]:
        return (
            [(f"{key}.src_file_name", path) for path in self.sources()]
            + [(f"{key}.tgt_file_name", path) for path in self.targets()]
            + [(f"{key}.answers_file_name", path) for path in self.answers() if path is not None]
        )


@dataclasses.dataclass(frozen=True)
class TextPairData:
    train_ds: TextPairFiles
    validation_ds: TextPairFiles

    def check(self, key: str) -> None:
        train, validation = self.train_ds, self.validation_ds
        if len(train.sources()) > 1 and train.concat_sampling_probabilities is None:
            raise config_fault(
                f"{key}.train_ds.concat_sampling_probabilities",
                None,
                f"give one probability per file pair ({len(train.sources())} pairs), summing to 1",
            )
        if validation.concat_sampling_probabilities is not None:
            raise config_fault(
                f"{key}.validation_ds.concat_sampling_probabilities",
                validation.concat_sampling_probabilities,
                "validation reads every file pair whole: set null",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class QaToText(SquadSource):
    """One SQuAD v1.1-format JSON file turned into a source/target pair of text files (kept once written)."""

    src_file_name: str  # written: one line per answerable question, holding the question and its paragraph
    tgt_file_name: str  # written: the question's first answer, on the same line number
    answers_file_name: str | None = None  # written when set: a JSON list of all the question's answers per line


@dataclasses.dataclass(frozen=True)
class T5FinetuneModel:
    restore_from_path: str | None  # the .nemo to start from
    global_batch_size: int  # samples per optimizer step over all data-parallel ranks
    micro_batch_size: int  # samples per forward pass per rank
    optim: OptimSection
    data: TextPairData
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; a .nemo of another layout is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1 (megatron-core has no T5 pipeline split)
    pipeline_model_parallel_split_rank: int | None = 0  # 0 with PP 1
    seed: int = 1234
    hidden_dropout: float = 0.1  # replace the pre-training values while fine-tuning
    attention_dropout: float = 0.1

    def check(self, key: str) -> None:
        if not self.restore_from_path:
            raise field_fault(self, key, "restore_from_path", f"name the .nemo to fine-tune ({NEMO_HINT})")
        positive_fields(self, key, "global_batch_size", "micro_batch_size", "tensor_model_parallel_size")
        check_no_pipeline_split(self, key)
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


def prepared_reads(preparation: list[QaToText] | None, stage: str) -> list[tuple[str, str]]:
    return [
        (f"{stage}.squad_preparation[{i}].source", item.source)
        for i, item in enumerate(preparation or [])
        if item.sample_questions is None
    ]


def prepared_writes(preparation: list[QaToText] | None) -> list[str]:
    return [
        path
        for item in preparation or []
        for path in (
            item.src_file_name,
            item.tgt_file_name,
            item.answers_file_name,
            item.source if item.sample_questions is not None else None,
        )
        if path is not None
    ]


def check_preparation(preparation: list[QaToText] | None, key: str) -> None:
    if preparation is not None and not preparation:
        raise config_fault(f"{key}.squad_preparation", [], "list the JSON files to convert, or set null")


@dataclasses.dataclass(frozen=True)
class T5FinetuneConfig(FinetuningStage, stage=STAGE):
    model: T5FinetuneModel
    squad_preparation: list[QaToText] | None = None  # SQuAD-format JSON -> text pairs, before training

    def check(self, key: str) -> None:
        check_preparation(self.squad_preparation, key)
        self.check_layout_and_schedule(key)

    def reads(self) -> list[tuple[str, str]]:
        key = f"{STAGE}.model"
        paths = [(f"{key}.restore_from_path", self.model.restore_from_path)]
        for split in ("train_ds", "validation_ds"):
            paths += getattr(self.model.data, split).files(f"{key}.data.{split}")
        return paths + prepared_reads(self.squad_preparation, STAGE)

    def writes(self) -> list[str]:
        return [self.exp_manager.explicit_log_dir] + prepared_writes(self.squad_preparation)

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program (SQuAD JSON -> text pairs); None: nothing to prepare."""
        return ("--config", config_file) if self.squad_preparation else None
