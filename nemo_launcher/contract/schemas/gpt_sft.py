"""Schema of the resolved `fine_tuning` and `peft` sections (conf/_family/gpt3_sft.yaml).

    cfg = SftConfig.from_dict(load_resolved_config(path), stage="fine_tuning")   # model.peft must be absent
    cfg = SftConfig.from_dict(load_resolved_config(path), stage="peft")          # model.peft is required

The architecture is not here: it comes from the `.nemo` named by model.restore_from_path. Keys under
trainer/exp_manager/model are checked strictly (a typo fails at once, naming the full key); `run` and
`squad_preparation` belong to the launcher and the SQuAD step, so they are let through.
"""
import dataclasses
from typing import Any, Dict, List, Literal, Optional

from ..common.config import JobConfigError, bind
from .config import OptimSection

TARGET_MODULES = ("attention_qkv", "attention_dense", "mlp_fc1", "mlp_fc2")
INIT_METHODS = Literal["xavier", "normal", "zero"]


def _positive(key: str, value) -> None:
    if value <= 0:
        raise JobConfigError(f"{key}: must be > 0, got {value}")


@dataclasses.dataclass(frozen=True)
class SftRun:
    name: str  # shown in the first log line


@dataclasses.dataclass(frozen=True)
class SftTrainer:
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]
    precision: Literal["bf16", "bf16-mixed", "16", "16-mixed", "32", "32-true", 16, 32]
    max_steps: int  # optimizer steps
    log_every_n_steps: int = 10
    val_check_interval: int = 200  # steps between validations; validation also runs after the last step
    limit_val_batches: int = 8  # global batches per validation; 0 disables validation
    gradient_clip_val: Optional[float] = None  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        for name in ("num_nodes", "devices", "max_steps", "log_every_n_steps", "val_check_interval"):
            _positive(f"{key}.{name}", getattr(self, name))
        if self.limit_val_batches < 0:
            raise JobConfigError(f"{key}.limit_val_batches: must be >= 0, got {self.limit_val_batches}")

    def precision_name(self) -> str:
        """'bf16', 'fp16' or 'fp32'."""
        return {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16"}.get(str(self.precision), "fp32")


@dataclasses.dataclass(frozen=True)
class SftExpManager:
    explicit_log_dir: str  # metrics.jsonl here; the result in <explicit_log_dir>/checkpoints/
    name: str  # file name of the result: checkpoints/<name>.nemo

    def nemo_path(self, suffix: str = "") -> str:
        return f"{self.explicit_log_dir}/checkpoints/{self.name}{suffix}.nemo"


@dataclasses.dataclass(frozen=True)
class MetricSection:
    name: Literal["loss", "exact_string_match"] = "loss"
    tokens_to_generate: int = 32  # exact_string_match: longest answer generated


@dataclasses.dataclass(frozen=True)
class DatasetSection:
    file_names: List[str]  # jsonl files, one {context_key: ..., label_key: ...} object per line
    concat_sampling_probabilities: Optional[List[float]] = None  # one per file, summing to 1
    context_key: str = "input"
    label_key: str = "output"
    prompt_template: str = "{input} {output}"  # must contain {input} and end with {output}
    max_seq_length: int = 2048  # tokens the model sees per sample
    truncation_field: Literal["context", "answer"] = "context"  # what loses tokens when a sample is too long
    add_eos: bool = True  # end the answer with the end-of-document token
    num_workers: int = 0  # DataLoader worker processes per rank
    names: Optional[List[str]] = None  # a label per file for the logs
    metric: MetricSection = MetricSection()

    def check(self, key: str) -> None:
        if not self.file_names:
            raise JobConfigError(f"{key}.file_names: list at least one jsonl file")
        _positive(f"{key}.max_seq_length", self.max_seq_length)
        if self.num_workers < 0:
            raise JobConfigError(f"{key}.num_workers: must be >= 0, got {self.num_workers}")
        if "{input}" not in self.prompt_template or not self.prompt_template.rstrip().endswith("{output}"):
            raise JobConfigError(f"{key}.prompt_template: {self.prompt_template!r} must contain {{input}} and end with {{output}}")
        weights = self.concat_sampling_probabilities
        if weights is None:
            if len(self.file_names) > 1:
                raise JobConfigError(f"{key}.concat_sampling_probabilities: give one probability per file "
                                     f"({len(self.file_names)} files)")
        elif len(weights) != len(self.file_names) or any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
            raise JobConfigError(f"{key}.concat_sampling_probabilities: {weights} needs one probability >= 0 per "
                                 f"file ({len(self.file_names)}), summing to 1")
        if self.names is not None and len(self.names) != len(self.file_names):
            raise JobConfigError(f"{key}.names: {len(self.names)} names for {len(self.file_names)} files")
        _positive(f"{key}.metric.tokens_to_generate", self.metric.tokens_to_generate)


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
    target_modules: List[str] = dataclasses.field(default_factory=lambda: ["attention_qkv"])
    layer_selection: Optional[List[int]] = None  # 1-based layer numbers; null = every layer

    def check(self, key: str) -> None:
        _positive(f"{key}.adapter_dim", self.adapter_dim)
        _positive(f"{key}.alpha", self.alpha)
        if not 0.0 <= self.adapter_dropout < 1.0:
            raise JobConfigError(f"{key}.adapter_dropout: must be in [0, 1), got {self.adapter_dropout}")
        unknown = [t for t in self.target_modules if t not in TARGET_MODULES + ("all",)]
        if not self.target_modules or unknown:
            raise JobConfigError(f"{key}.target_modules: {self.target_modules} must list some of "
                                 f"{', '.join(TARGET_MODULES)}, or all")

    def targets(self) -> List[str]:
        return list(TARGET_MODULES) if "all" in self.target_modules else list(dict.fromkeys(self.target_modules))


@dataclasses.dataclass(frozen=True)
class PeftSection:
    peft_scheme: Literal["lora"]
    lora_tuning: LoraSection
    restore_from_path: Optional[str] = None  # an adapter file to continue from
    merge: bool = True  # also write <name>_merged.nemo


@dataclasses.dataclass(frozen=True)
class SftModel:
    restore_from_path: str  # the .nemo to start from
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
    peft: Optional[PeftSection] = None

    def check(self, key: str) -> None:
        for name in ("global_batch_size", "micro_batch_size", "tensor_model_parallel_size"):
            _positive(f"{key}.{name}", getattr(self, name))
        if self.pipeline_model_parallel_size != 1:
            raise JobConfigError(f"{key}.pipeline_model_parallel_size: fine-tuning runs without pipeline parallelism; "
                                 f"set 1 (got {self.pipeline_model_parallel_size})")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise JobConfigError(f"{key}.{name}: must be in [0, 1), got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class SftConfig:
    run: SftRun
    trainer: SftTrainer
    exp_manager: SftExpManager
    model: SftModel

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: Literal["fine_tuning", "peft"]) -> "SftConfig":
        unknown = sorted(set(data) - {"run", "trainer", "exp_manager", "model", "squad_preparation"})
        if unknown:
            raise JobConfigError(f"{stage}.{unknown[0]}: unknown section; a {stage} config holds run, trainer, "
                                 "exp_manager, model (and squad_preparation)")
        cfg = cls(
            run=bind(SftRun, data.get("run"), f"{stage}.run", strict=False),
            trainer=bind(SftTrainer, data.get("trainer"), f"{stage}.trainer"),
            exp_manager=bind(SftExpManager, data.get("exp_manager"), f"{stage}.exp_manager", strict=False),
            model=bind(SftModel, data.get("model"), f"{stage}.model"),
        )
        if stage == "peft" and cfg.model.peft is None:
            raise JobConfigError("peft.model.peft: missing; set peft_scheme: lora and lora_tuning")
        if stage == "fine_tuning" and cfg.model.peft is not None:
            raise JobConfigError("fine_tuning.model.peft: fine-tuning trains every weight; use the peft stage for adapters")
        return cfg

    def data_parallel_size(self, world_size: int) -> int:
        t, m = self.trainer, self.model
        if world_size != t.num_nodes * t.devices:
            raise JobConfigError(f"trainer.num_nodes({t.num_nodes}) x trainer.devices({t.devices}) = "
                                 f"{t.num_nodes * t.devices} but {world_size} processes were started")
        if world_size % m.tensor_model_parallel_size:
            raise JobConfigError(f"model.tensor_model_parallel_size: TP({m.tensor_model_parallel_size}) does not divide "
                                 f"the {world_size} processes started")
        dp = world_size // m.tensor_model_parallel_size
        if m.global_batch_size % (m.micro_batch_size * dp):
            raise JobConfigError(f"model.global_batch_size: {m.global_batch_size} is not a multiple of micro_batch_size"
                                 f"({m.micro_batch_size}) x data-parallel size({dp}) = {m.micro_batch_size * dp}")
        return dp
