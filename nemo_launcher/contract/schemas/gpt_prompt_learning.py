"""Schema of the resolved `prompt_learning`, `adapter_learning` and `ia3_learning` sections of the GPT, T5 and mT5
families (conf/_family/gpt3_prompt_learning.yaml, t5_prompt_learning.yaml): parameter-efficient tuning of a frozen
`.nemo` on prompt-learning jsonl files ({"taskname": ..., <the template's fields>, <answer_field>: ...} per line).
A T5 reads the prompt with its encoder and learns the answer with its decoder; encoder_seq_length bounds both.

    cfg = PromptLearningConfig.from_dict(section, stage="prompt_learning")   # p-tuning or prompt tuning
    cfg = PromptLearningConfig.from_dict(section, stage="adapter_learning")  # Houlsby adapters (adapter_tuning)
    cfg = PromptLearningConfig.from_dict(section, stage="ia3_learning")      # IA3 scaling vectors

A task template names where virtual tokens go (<|VIRTUAL_PROMPT_0|>, <|VIRTUAL_PROMPT_1|>, ...) and the fields of
a line ({context}, {question}, ...); it ends with the answer field. The architecture comes from the `.nemo`.
"""

import dataclasses
import re
from typing import Any, Literal

from ..binding import bind_stage, config_fault, field_fault, fraction, no_pipeline_parallel, positive, positive_fields
from .common_training import OptimSection, check_layout, check_schedule, check_world_size
from .common_tuning import SftExpManager, SftRun, SftTrainer, SquadSource

STAGES = ("prompt_learning", "adapter_learning", "ia3_learning")
# The virtual_prompt_style each stage trains with.
STYLES = {
    "prompt_learning": ("p-tuning", "prompt-tuning"),
    "adapter_learning": ("no-prompts",),
    "ia3_learning": ("no-prompts",),
}
VIRTUAL_MARKER = re.compile(r"<\|VIRTUAL_PROMPT_(\d+)\|>")
FIELD = re.compile(r"\{(\w+)\}")
INIT_METHODS = Literal["xavier", "normal", "zero"]


@dataclasses.dataclass(frozen=True)
class TaskTemplate:
    taskname: str  # the "taskname" of the jsonl lines this template lays out
    prompt_template: str  # e.g. "<|VIRTUAL_PROMPT_0|> Context: {context} Question: {question} Answer: {answer}"
    total_virtual_tokens: int = 0  # virtual tokens in all; 0 for adapters and IA3
    virtual_token_splits: list[int] = dataclasses.field(default_factory=list)  # how many at each marker, in order
    truncate_field: str | None = None  # the field that loses tokens when a line is too long; null: keep the end
    answer_field: str = "answer"  # the field the model learns to produce; the template ends with it
    answer_only_loss: bool = True  # loss on the answer (and end-of-document) tokens only

    def check(self, key: str) -> None:
        markers = [int(n) for n in VIRTUAL_MARKER.findall(self.prompt_template)]
        if markers != list(range(len(markers))):
            raise field_fault(
                self,
                key,
                "prompt_template",
                "number the virtual prompt markers <|VIRTUAL_PROMPT_0|>, <|VIRTUAL_PROMPT_1|>, ... in order",
            )
        if (
            len(self.virtual_token_splits) != len(markers)
            or sum(self.virtual_token_splits) != self.total_virtual_tokens
        ):
            raise field_fault(
                self,
                key,
                "virtual_token_splits",
                f"give one count per <|VIRTUAL_PROMPT_n|> marker ({len(markers)}), summing to "
                f"total_virtual_tokens ({self.total_virtual_tokens})",
            )
        if any(n < 1 for n in self.virtual_token_splits):
            raise field_fault(self, key, "virtual_token_splits", "each count must be >= 1")
        if not self.prompt_template.rstrip().endswith("{" + self.answer_field + "}"):
            raise field_fault(
                self, key, "prompt_template", f"must end with the answer field {{{self.answer_field}}} (answer_field)"
            )
        if self.truncate_field is not None and (
            self.truncate_field not in self.fields() or self.truncate_field == self.answer_field
        ):
            raise field_fault(
                self,
                key,
                "truncate_field",
                f"name one of the template's input fields ({', '.join(self.fields()) or 'none'}), or null",
            )

    def fields(self) -> list[str]:
        """The {fields} before the answer, in template order."""
        return [f for f in FIELD.findall(self.prompt_template) if f != self.answer_field]


@dataclasses.dataclass(frozen=True)
class PromptTuningSection:
    """How the virtual tokens of each new task start (prompt tuning; p-tuning's encoder starts at random)."""

    new_prompt_init_methods: list[Literal["text", "random"]] | None = None  # one per new task; null: all random
    new_prompt_init_text: list[str | None] | None = None  # one per new task: text whose embeddings start it


@dataclasses.dataclass(frozen=True)
class PTuningSection:
    """The prompt encoder of p-tuning: it produces the virtual tokens from trained inputs while training; its
    output is stored as the task's virtual tokens at the end, so inference needs no encoder."""

    encoder_type: Literal["mlp", "tpmlp", "lstm"] = "tpmlp"  # tpmlp: the MLP (kept whole on every TP rank here)
    dropout: float = 0.0
    num_layers: int = 2  # MLP layers, or stacked bidirectional LSTM layers
    encoder_hidden: int = 2048  # width of the MLP's hidden layers / the LSTM's state
    init_std: float = 0.023  # std of the MLP's initial weights

    def check(self, key: str) -> None:
        fraction(f"{key}.dropout", self.dropout)
        positive_fields(self, key, "num_layers", "encoder_hidden")
        positive(f"{key}.init_std", self.init_std)


@dataclasses.dataclass(frozen=True)
class AdapterSection:
    """Houlsby adapters after each layer's attention and MLP: x + up(act(down(norm(x))))."""

    type: Literal["parallel_adapter"] = "parallel_adapter"
    adapter_dim: int = 16  # the bottleneck width
    adapter_dropout: float = 0.1  # dropout on the adapter's output
    norm_position: Literal["pre", "post"] = "pre"  # the layer norm before the down projection, or after the up one
    column_init_method: INIT_METHODS = "xavier"  # the down projection
    row_init_method: INIT_METHODS = "zero"  # the up projection; zero: training starts from the base model
    norm_type: Literal["mixedfusedlayernorm", "layernorm"] = "mixedfusedlayernorm"  # both a LayerNorm here

    def check(self, key: str) -> None:
        positive(f"{key}.adapter_dim", self.adapter_dim)
        fraction(f"{key}.adapter_dropout", self.adapter_dropout)


@dataclasses.dataclass(frozen=True)
class PromptData:
    train_ds: list[str]  # prompt-learning jsonl files, mixed in proportion to their sizes
    validation_ds: list[str]  # each validated on its own (val_loss_<file name>), val_loss their mean
    add_eos: bool = True  # end each answer with the end-of-document token
    shuffle: bool = True  # a fresh order of the training lines on every pass (a function of model.seed)
    num_workers: int = 0  # DataLoader worker processes per rank
    pin_memory: bool = True  # page-locked host batches (GPU runs)

    def check(self, key: str) -> None:
        for split in ("train_ds", "validation_ds"):
            files = getattr(self, split)
            if not files or not all(files):
                raise config_fault(
                    f"{key}.{split}", files, "list one or more jsonl files, e.g. [/data/squad_train.jsonl]"
                )
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")


@dataclasses.dataclass(frozen=True)
class PromptLearningModel:
    language_model_path: str  # the frozen .nemo (the conversion stage's megatron_gpt.nemo, megatron_t5.nemo, ...)
    nemo_path: str  # the result: the method's tensors (virtual tokens, adapters, IA3 vectors) as a .nemo
    global_batch_size: int
    micro_batch_size: int
    optim: OptimSection
    data: PromptData
    task_templates: list[TaskTemplate]
    new_tasks: list[str]  # the tasks trained by this run
    virtual_prompt_style: Literal["p-tuning", "prompt-tuning", "no-prompts"]
    existing_tasks: list[str] = dataclasses.field(default_factory=list)  # tasks of restore_path, kept unchanged
    restore_path: str | None = None  # an earlier result of this method, to add new tasks to (prompt learning)
    seed: int = 1234
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; the .nemo is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    model_parallel_size: int | None = None  # TP x PP, as the seed's configs compute it
    encoder_seq_length: int = 2048  # longest line in tokens, virtual tokens included
    sequence_parallel: bool = False  # a speed setting of TP > 1 with Transformer Engine; off on the local spec
    hidden_dropout: float = 0.0  # replace the base model's dropout while tuning
    attention_dropout: float = 0.0
    prompt_tuning: PromptTuningSection = PromptTuningSection()
    p_tuning: PTuningSection = PTuningSection()
    adapter_tuning: AdapterSection | None = None

    def check(self, key: str) -> None:
        positive_fields(
            self, key, "global_batch_size", "micro_batch_size", "tensor_model_parallel_size", "encoder_seq_length"
        )
        no_pipeline_parallel(
            self,
            key,
            "tuning runs without pipeline parallelism: set 1 and split a large model with tensor_model_parallel_size",
        )
        if self.model_parallel_size is not None and self.model_parallel_size != self.tensor_model_parallel_size:
            raise field_fault(self, key, "model_parallel_size", f"must be TP x PP = {self.tensor_model_parallel_size}")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)
        names = [t.taskname for t in self.task_templates]
        if len(set(names)) != len(names):
            raise config_fault(f"{key}.task_templates", names, "give each taskname one template")
        for field in ("new_tasks", "existing_tasks"):
            unknown = [t for t in getattr(self, field) if t not in names]
            if unknown:
                raise config_fault(
                    f"{key}.{field}",
                    getattr(self, field),
                    f"{unknown[0]!r} has no entry in task_templates ({', '.join(names)})",
                )
        if not self.new_tasks:
            raise field_fault(self, key, "new_tasks", "name the task(s) this run trains, e.g. [squad]")
        both = sorted(set(self.new_tasks) & set(self.existing_tasks))
        if both:
            raise field_fault(self, key, "new_tasks", f"{both[0]!r} is also an existing task; a task is trained once")

    def template(self, task: str) -> TaskTemplate:
        return next(t for t in self.task_templates if t.taskname == task)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromptSquadSplit(SquadSource):
    output: str  # the prompt-learning jsonl written from it


@dataclasses.dataclass(frozen=True)
class PromptSquadPreparation:
    layout: Literal["prompt_learning"] = "prompt_learning"
    train: PromptSquadSplit | None = None
    validation: PromptSquadSplit | None = None
    test: PromptSquadSplit | None = None  # what the evaluation configs read

    def splits(self) -> list[tuple[str, PromptSquadSplit]]:
        return [
            (name, split)
            for name, split in (("train", self.train), ("validation", self.validation), ("test", self.test))
            if split is not None
        ]


@dataclasses.dataclass(frozen=True)
class PromptLearningConfig:
    run: SftRun
    trainer: SftTrainer
    exp_manager: SftExpManager
    model: PromptLearningModel
    squad_preparation: PromptSquadPreparation | None = None  # SQuAD JSON -> jsonl first (jobs/data/squad.py)

    def check(self, key: str) -> None:
        m, style = self.model, self.model.virtual_prompt_style
        if style not in STYLES[key]:
            raise config_fault(
                f"{key}.model.virtual_prompt_style", style, f"the {key} stage trains with {' or '.join(STYLES[key])}"
            )
        if key == "adapter_learning" and m.adapter_tuning is None:
            raise config_fault(f"{key}.model.adapter_tuning", None, "missing: set adapter_dim, adapter_dropout, ...")
        if key != "adapter_learning" and m.adapter_tuning is not None:
            raise config_fault(f"{key}.model.adapter_tuning", "...", "adapters are the adapter_learning stage's")
        tokens = {m.template(t).total_virtual_tokens for t in m.new_tasks}
        if key == "prompt_learning":
            if 0 in tokens or len(tokens) != 1:
                raise config_fault(
                    f"{key}.model.task_templates",
                    sorted(tokens),
                    "every new task needs the same total_virtual_tokens, at least 1",
                )
            if m.existing_tasks and not m.restore_path:
                raise config_fault(
                    f"{key}.model.restore_path",
                    None,
                    f"existing_tasks {m.existing_tasks} live in an earlier prompt .nemo: name it here",
                )
            init = m.prompt_tuning
            for field in ("new_prompt_init_methods", "new_prompt_init_text"):
                values = getattr(init, field)
                if values is not None and len(values) != len(m.new_tasks):
                    raise config_fault(
                        f"{key}.model.prompt_tuning.{field}",
                        values,
                        f"give one entry per new task ({len(m.new_tasks)})",
                    )
            for index, method in enumerate(init.new_prompt_init_methods or []):
                if method == "text" and not (init.new_prompt_init_text or [None] * len(m.new_tasks))[index]:
                    raise config_fault(
                        f"{key}.model.prompt_tuning.new_prompt_init_text",
                        init.new_prompt_init_text,
                        f"task {m.new_tasks[index]!r} starts from text: give the text",
                    )
        else:
            if tokens != {0}:
                raise config_fault(
                    f"{key}.model.task_templates",
                    sorted(tokens),
                    "adapters and IA3 use no virtual tokens: set total_virtual_tokens: 0 and no markers",
                )
            if m.existing_tasks or m.restore_path:
                raise config_fault(
                    f"{key}.model.restore_path",
                    m.restore_path,
                    "adding tasks to an earlier result is prompt learning's; train adapters and IA3 anew",
                )
        check_layout(m, self.trainer.num_nodes, self.trainer.devices, key)
        check_schedule(m, self.trainer, key)

    @property
    def stage(self) -> str:
        if self.model.virtual_prompt_style != "no-prompts":
            return "prompt_learning"
        return "adapter_learning" if self.model.adapter_tuning is not None else "ia3_learning"

    def reads(self) -> list[tuple[str, str]]:
        key = f"{self.stage}.model"
        paths = [(f"{key}.language_model_path", self.model.language_model_path)]
        if self.model.restore_path:
            paths.append((f"{key}.restore_path", self.model.restore_path))
        prepared = {split.output for _, split in self.squad_preparation.splits()} if self.squad_preparation else set()
        for split in ("train_ds", "validation_ds"):
            paths += [(f"{key}.data.{split}", name) for name in getattr(self.model.data, split) if name not in prepared]
        if self.squad_preparation is not None:  # this job's first step converts these into the jsonl files above
            paths += [
                (f"{self.stage}.squad_preparation.{name}.source", split.source)
                for name, split in self.squad_preparation.splits()
                if split.sample_questions is None
            ]
        return paths

    def writes(self) -> list[str]:
        outputs = [split.output for _, split in self.squad_preparation.splits()] if self.squad_preparation else []
        return [self.exp_manager.explicit_log_dir, self.model.nemo_path] + outputs

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program (SQuAD JSON -> jsonl), run first; None: nothing to prepare."""
        return ("--config", config_file) if self.squad_preparation is not None else None

    @classmethod
    def from_dict(cls, data: dict[str, Any], stage: str) -> "PromptLearningConfig":
        assert stage in STAGES, stage
        return bind_stage(cls, data, stage)

    def data_parallel_size(self, world_size: int) -> int:
        check_world_size(self.trainer, world_size, self.stage)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, self.stage)
