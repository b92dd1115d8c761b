"""Schema of the `evaluation` section of a model tuned by prompt learning, adapters or IA3: the frozen base `.nemo`
with the method's result file answers each line of prompt-learning jsonl test files (greedy decoding), scored by
exact match and F1 as SQuAD v1.1's official script computes them.

    cfg = TunedEvaluationConfig.from_dict(section, "evaluation")     # conf/evaluation/{adapter,ia3}_gpt3/squad.yaml,
                                                                     # {prompt,adapter,ia3}_t5/squad.yaml,
                                                                     # prompt_mt5/squad.yaml
    cfg = PromptGptEvaluationConfig.from_dict(section, "evaluation")  # conf/evaluation/prompt_gpt3/squad.yaml

The two layouts are the seed's: prompt_gpt3 names the prompt file `model.nemo_model` and its test files
`model.prompt_dataset_paths`; the others name the base `model.language_model_path`, the result file
`model.virtual_prompt_model_file` (prompt learning) or `model.adapter_model_file` (adapters or IA3: the file says
which) and the test files `model.data.test_ds`. Each line's taskname picks the task template the result file
recorded when it was trained. One job of nodes x ntasks_per_node processes: TP ranks per model copy, the copies share
the lines. Under <run.results_dir>/results/ it writes <test file name>_predictions.jsonl ({"taskname", "prompt",
"prediction", "answers"} per line, in file order) and qa_metrics.json ({"<test file name>": {"exact_match": %,
"f1": %, "examples": n}, ..., "average": {...}}).
"""

import dataclasses
from pathlib import Path
from typing import Any, Literal

from ..binding import StageSchema, config_fault, field_fault, no_pipeline_parallel, positive_fields
from .common_training import StoredPrecision, check_model_copies
from .run import RunBase

STAGE = "evaluation"
RESULTS_FILE = "qa_metrics.json"
PREDICTIONS_SUFFIX = "_predictions.jsonl"
PRECISIONS = Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TunedEvaluationRun(RunBase):
    model_train_name: str | None = None  # the pre-training run whose converted model was tuned
    nodes: int = 1  # the configs derive it from TP and cluster.gpus_per_node
    ntasks_per_node: int = 1
    task_name: str | None = None  # the tuned task (the T5 configs name the job after it)
    eval_name: str | None = None  # the GPT configs name the job after it
    tasks: Literal["prompt", "adapter"] | None = None  # the GPT configs' kind of test task, as the seed writes it
    # The tuning run whose result is evaluated (the configs build the result file's path from it).
    prompt_learn_dir: str | None = None
    prompt_learning_dir: str | None = None
    adapter_learning_dir: str | None = None

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")


@dataclasses.dataclass(frozen=True)
class EvaluationFiles:
    test_ds: list[str]  # prompt-learning jsonl files, each scored on its own
    num_workers: int = 4  # DataLoader processes that read and tokenize the lines, per rank
    global_batch_size: int = 16  # lines answered at once over all model copies: micro_batch_size x copies
    micro_batch_size: int = 16  # lines per forward pass of one model copy

    def check(self, key: str) -> None:
        if not self.test_ds or not all(self.test_ds):
            raise field_fault(self, key, "test_ds", "list one or more jsonl files, e.g. [/data/squad_test.jsonl]")
        positive_fields(self, key, "global_batch_size", "micro_batch_size")
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Parallel(StoredPrecision):
    """What every tuned-evaluation model section shares."""

    language_model_path: str  # the frozen base .nemo the method was trained on (the conversion's output)
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; the .nemo is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    model_parallel_size: int | None = None  # TP x PP, for the launcher's node count; checked when set
    precision: PRECISIONS | None = None  # bf16, 16 or 32; null: the dtype the base .nemo stores
    tokens_to_generate: int = 32  # the longest answer generated

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "tokens_to_generate")
        no_pipeline_parallel(
            self,
            key,
            "evaluation runs without pipeline parallelism: set 1 and split the model with tensor_model_parallel_size",
        )
        tp = self.tensor_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp:
            raise field_fault(self, key, "model_parallel_size", f"must equal TP({tp}) x PP(1) = {tp}")
        for name in self.path_keys():
            value = getattr(self, name)
            if not value or not Path(value).is_absolute():
                raise config_fault(f"{key}.{name}", value, "must be an absolute path to a .nemo")

    def path_keys(self) -> tuple[str, ...]:
        return ("language_model_path",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TunedEvaluationModel(_Parallel):
    data: EvaluationFiles
    virtual_prompt_model_file: str | None = None  # prompt learning's result (megatron_{t5,mt5}_prompt.nemo)
    adapter_model_file: str | None = None  # adapter or IA3 learning's result (megatron_*_{adapter,ia3}.nemo)
    pipeline_model_parallel_split_rank: int | None = 0  # 0 with PP 1

    def check(self, key: str) -> None:
        given = [name for name in ("virtual_prompt_model_file", "adapter_model_file") if getattr(self, name)]
        if len(given) != 1:
            raise config_fault(
                f"{key}.{given[-1] if given else 'adapter_model_file'}",
                "both" if given else None,
                "name exactly one result file: virtual_prompt_model_file (prompt learning) or "
                "adapter_model_file (adapters, IA3)",
            )
        if self.pipeline_model_parallel_split_rank not in (None, 0):
            raise field_fault(
                self, key, "pipeline_model_parallel_split_rank", "must be 0 with pipeline_model_parallel_size 1"
            )
        super().check(key)

    def path_keys(self) -> tuple[str, ...]:
        return (
            "language_model_path",
            "virtual_prompt_model_file" if self.virtual_prompt_model_file else "adapter_model_file",
        )

    @property
    def method_file(self) -> str:
        return self.virtual_prompt_model_file or self.adapter_model_file

    @property
    def method_key(self) -> str:
        return self.path_keys()[1]

    @property
    def test_files(self) -> list[str]:
        return list(self.data.test_ds)

    @property
    def test_key(self) -> str:
        return "model.data.test_ds"

    @property
    def lines_per_pass(self) -> int:
        return self.data.micro_batch_size

    @property
    def reader_workers(self) -> int:
        return self.data.num_workers

    with_virtual_tokens = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromptGptModel(_Parallel):
    nemo_model: str  # prompt learning's result (megatron_gpt_prompt.nemo)
    prompt_dataset_paths: str | list[str]  # one prompt-learning jsonl test file, or several
    model_type: Literal["nemo-gpt3-prompt"] = "nemo-gpt3-prompt"
    eval_batch_size: int = 4  # lines per forward pass of one model copy
    disable_special_tokens: bool = False  # true: answer without the virtual tokens (the base model's own answers)
    num_workers: int = 0  # DataLoader processes that read and tokenize the lines, per rank

    def check(self, key: str) -> None:
        if not self.test_files or not all(self.test_files):
            raise field_fault(
                self,
                key,
                "prompt_dataset_paths",
                "name the jsonl test file(s), e.g. /data/prompt_data/v1.1/squad_test.jsonl",
            )
        positive_fields(self, key, "eval_batch_size")
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")
        super().check(key)

    def path_keys(self) -> tuple[str, ...]:
        return ("language_model_path", "nemo_model")

    method_file = property(lambda self: self.nemo_model)
    method_key = property(lambda self: "nemo_model")
    test_files = property(
        lambda self: (
            [self.prompt_dataset_paths]
            if isinstance(self.prompt_dataset_paths, str)
            else list(self.prompt_dataset_paths)
        )
    )
    test_key = property(lambda self: "model.prompt_dataset_paths")
    lines_per_pass = property(lambda self: self.eval_batch_size)
    reader_workers = property(lambda self: self.num_workers)
    with_virtual_tokens = property(lambda self: not self.disable_special_tokens)


class _TunedEvaluation(StageSchema, stage=STAGE):
    run: TunedEvaluationRun
    model: Any

    def check(self, key: str) -> None:
        tp = self.model.tensor_model_parallel_size
        processes = check_model_copies(self.run, tp, key)
        data = getattr(self.model, "data", None)
        if data is not None and data.global_batch_size != data.micro_batch_size * (processes // tp):
            raise config_fault(
                f"{key}.model.data.global_batch_size",
                data.global_batch_size,
                f"must be micro_batch_size({data.micro_batch_size}) x model copies "
                f"({processes} processes / TP({tp}) = {processes // tp})",
            )
        names = [Path(path).stem for path in self.model.test_files]
        if len(set(names)) != len(names):
            raise config_fault(
                f"{key}.{self.model.test_key}",
                self.model.test_files,
                "give the test files distinct names: each one's results are filed under its name",
            )

    def reads(self) -> list[tuple[str, str]]:
        paths = [(f"{STAGE}.model.{name}", getattr(self.model, name)) for name in self.model.path_keys()]
        return paths + [(f"{STAGE}.{self.model.test_key}", path) for path in self.model.test_files]

    def writes(self) -> list[str]:
        return [self.run.results_dir]

    @property
    def results_file(self) -> Path:
        return Path(self.run.results_dir) / "results" / RESULTS_FILE

    def predictions_file(self, name: str) -> Path:
        return Path(self.run.results_dir) / "results" / f"{name}{PREDICTIONS_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class TunedEvaluationConfig(_TunedEvaluation):
    run: TunedEvaluationRun
    model: TunedEvaluationModel


@dataclasses.dataclass(frozen=True)
class PromptGptEvaluationConfig(_TunedEvaluation):
    run: TunedEvaluationRun
    model: PromptGptModel
