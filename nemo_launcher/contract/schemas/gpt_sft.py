"""Schema of the resolved `fine_tuning` and `peft` sections of the GPT family (conf/_family/gpt3_sft.yaml).

    cfg = SftConfig.from_dict(section, stage="fine_tuning")   # model.peft must be absent
    cfg = SftConfig.from_dict(section, stage="peft")          # model.peft is required

The architecture is not here: it comes from the `.nemo` named by model.restore_from_path, so the layout rules
that need it (heads divisible by TP) are the job's; those that need only the batch sizes are checked at bind.
"""

import dataclasses
from typing import Any, Literal

from ..binding import bind_stage, config_fault, field_fault, fraction, no_pipeline_parallel, positive, positive_fields
from .common_training import OptimSection, check_layout, check_schedule, check_world_size
from .common_tuning import SftExpManager, SftRun, SftTrainer, SquadSource

TARGET_MODULES = ("attention_qkv", "attention_dense", "mlp_fc1", "mlp_fc2")
INIT_METHODS = Literal["xavier", "normal", "zero"]
STAGES = ("fine_tuning", "peft")


@dataclasses.dataclass(frozen=True)
class MetricSection:
    name: Literal["loss", "exact_string_match"] = "loss"
    tokens_to_generate: int = 32  # exact_string_match: longest answer generated

    def check(self, key: str) -> None:
        positive(f"{key}.tokens_to_generate", self.tokens_to_generate)


@dataclasses.dataclass(frozen=True)
class DatasetSection:
    file_names: list[str]  # jsonl files, one {context_key: ..., label_key: ...} object per line
    concat_sampling_probabilities: list[float] | None = None  # one per file, summing to 1
    context_key: str = "input"
    label_key: str = "output"
    prompt_template: str = "{input} {output}"  # must contain {input} and end with {output}
    max_seq_length: int = 2048  # tokens the model sees per sample
    truncation_field: Literal["context", "answer"] = "context"  # what loses tokens when a sample is too long
    add_eos: bool = True  # end the answer with the end-of-document token
    num_workers: int = 0  # DataLoader worker processes per rank
    names: list[str] | None = None  # a label per file for the logs
    metric: MetricSection = MetricSection()

    def check(self, key: str) -> None:
        if not self.file_names or not all(self.file_names):
            raise field_fault(self, key, "file_names", "list one or more jsonl files, e.g. [/data/train.jsonl]")
        positive(f"{key}.max_seq_length", self.max_seq_length)
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")
        if "{input}" not in self.prompt_template or not self.prompt_template.rstrip().endswith("{output}"):
            raise field_fault(
                self,
                key,
                "prompt_template",
                'must contain {input} and end with {output}, e.g. "{input} {output}" or "Q: {input}\\nA: {output}"',
            )
        weights = self.concat_sampling_probabilities
        if weights is None:
            if len(self.file_names) > 1:
                raise config_fault(
                    f"{key}.concat_sampling_probabilities",
                    None,
                    f"give one probability per file ({len(self.file_names)} files), summing to 1",
                )
        elif len(weights) != len(self.file_names) or any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
            raise config_fault(
                f"{key}.concat_sampling_probabilities",
                weights,
                f"give one probability >= 0 per file ({len(self.file_names)} files), summing to 1",
            )
        if self.names is not None and len(self.names) != len(self.file_names):
            raise field_fault(self, key, "names", f"give one name per file ({len(self.file_names)} files)")


@dataclasses.dataclass(frozen=True)
class DataSection:
    train_ds: DatasetSection
    validation_ds: DatasetSection


@dataclasses.dataclass(frozen=True)
class LoraSection:
    adapter_dim: int = 32  # rank r of the update B A
    alpha: float = 32.0  # the update is scaled by alpha / adapter_dim
    adapter_dropout: float = 0.0  # dropout on the adapter's input
    column_init_method: INIT_METHODS = "xavier"  # A (adapter_dim x in)
    row_init_method: INIT_METHODS = "zero"  # B (out x adapter_dim); zero: training starts from the base model
    target_modules: list[str] = dataclasses.field(default_factory=lambda: ["attention_qkv"])
    layer_selection: list[int] | None = None  # 1-based layer numbers; null = every layer

    def check(self, key: str) -> None:
        positive(f"{key}.adapter_dim", self.adapter_dim)
        positive(f"{key}.alpha", self.alpha)
        fraction(f"{key}.adapter_dropout", self.adapter_dropout)
        unknown = [t for t in self.target_modules if t not in TARGET_MODULES + ("all",)]
        if not self.target_modules or unknown:
            raise field_fault(self, key, "target_modules", f"list some of {', '.join(TARGET_MODULES)}, or all")
        if self.layer_selection is not None and any(layer < 1 for layer in self.layer_selection):
            raise field_fault(self, key, "layer_selection", "layer numbers start at 1")

    def targets(self) -> list[str]:
        return list(TARGET_MODULES) if "all" in self.target_modules else list(dict.fromkeys(self.target_modules))


@dataclasses.dataclass(frozen=True)
class PeftSection:
    peft_scheme: Literal["lora"]
    lora_tuning: LoraSection
    restore_from_path: str | None = None  # an adapter file to continue from
    merge: bool = True  # also write <name>_merged.nemo


@dataclasses.dataclass(frozen=True)
class SftModel:
    restore_from_path: str | None  # the .nemo to start from
    global_batch_size: int
    micro_batch_size: int
    optim: OptimSection
    data: DataSection
    tensor_model_parallel_size: int = 1  # any; a .nemo of another layout is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    seed: int = 1234
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    answer_only_loss: bool = True
    peft: PeftSection | None = None

    def check(self, key: str) -> None:
        if not self.restore_from_path:
            raise field_fault(
                self,
                key,
                "restore_from_path",
                "name the .nemo to fine-tune "
                "(the conversion stage writes <train dir>/convert_nemo/results/megatron_gpt.nemo)",
            )
        positive_fields(self, key, "global_batch_size", "micro_batch_size", "tensor_model_parallel_size")
        no_pipeline_parallel(
            self,
            key,
            "fine-tuning runs without pipeline parallelism: set 1 and split a large model with "
            "tensor_model_parallel_size",
        )
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadSplit(SquadSource):
    """SQuAD v1.1 JSON as published at `source` (or, with sample_questions, a generated stand-in written there)."""

    output: str  # the prompt/answer jsonl written from it


@dataclasses.dataclass(frozen=True)
class SquadPreparation:
    train: SquadSplit | None = None
    validation: SquadSplit | None = None


@dataclasses.dataclass(frozen=True)
class SftConfig:
    run: SftRun
    trainer: SftTrainer
    exp_manager: SftExpManager
    model: SftModel
    squad_preparation: SquadPreparation | None = None  # SQuAD JSON -> jsonl before training (jobs/data/squad.py)

    def check(self, key: str) -> None:
        if key == "peft" and self.model.peft is None:
            raise config_fault("peft.model.peft", None, "missing: set peft_scheme: lora and lora_tuning")
        if key == "fine_tuning" and self.model.peft is not None:
            raise config_fault(
                "fine_tuning.model.peft", "...", "fine-tuning trains every weight; use the peft stage for adapters"
            )
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)
        check_schedule(self.model, self.trainer, key)

    def reads(self) -> list[tuple[str, str]]:
        key = f"{self.stage}.model"
        paths = [(f"{key}.restore_from_path", self.model.restore_from_path)]
        if self.model.peft is not None and self.model.peft.restore_from_path:
            paths.append((f"{key}.peft.restore_from_path", self.model.peft.restore_from_path))
        for split in ("train_ds", "validation_ds"):
            paths += [(f"{key}.data.{split}.file_names", name) for name in getattr(self.model.data, split).file_names]
        if self.squad_preparation is not None:  # this job's first step converts these into the jsonl files above
            paths += [
                (f"{self.stage}.squad_preparation.{name}.source", split.source)
                for name, split in (
                    ("train", self.squad_preparation.train),
                    ("validation", self.squad_preparation.validation),
                )
                if split is not None and split.sample_questions is None  # a stand-in is written by the job
            ]
        return paths

    def writes(self) -> list[str]:
        squad = self.squad_preparation
        outputs = [split.output for split in (squad.train, squad.validation) if split is not None] if squad else []
        return [self.exp_manager.explicit_log_dir] + outputs

    def preparation_args(self, config_file: str) -> tuple[str, ...] | None:
        """Arguments of the family's preparation program (SQuAD JSON -> jsonl), run first; None: nothing to prepare."""
        return ("--config", config_file) if self.squad_preparation is not None else None

    @classmethod
    def from_dict(cls, data: dict[str, Any], stage: Literal["fine_tuning", "peft"]) -> "SftConfig":
        assert stage in STAGES, stage
        return bind_stage(cls, data, stage)

    @property
    def stage(self) -> str:
        return "peft" if self.model.peft is not None else "fine_tuning"

    def data_parallel_size(self, world_size: int) -> int:
        check_world_size(self.trainer, world_size, self.stage)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, self.stage)
