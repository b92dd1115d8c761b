"""Schema of the resolved `conversion` section of the GPT family (conf/conversion/gpt3/convert_gpt3.yaml).

One job of TP x PP processes (the layout of the .nemo it writes) over run.nodes x run.ntasks_per_node.
"""
import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple

from ..binding import bind_stage, config_fault, positive_fields
from .run import RunBase

STAGE = "conversion"
HF_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConversionRun(RunBase):
    nodes: int = 1  # nodes of the job; the config derives it from TP x PP and cluster.gpus_per_node
    ntasks_per_node: int = 1  # processes per node
    nemo_file_name: str = "megatron_gpt.nemo"  # the .nemo goes to <results_dir>/results/<nemo_file_name>
    convert_name: Optional[str] = None  # folder under the training run's directory
    model_train_name: Optional[str] = None  # the training run converted
    train_dir: Optional[str] = None  # that run's directory

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "nodes", "ntasks_per_node")
        if not self.nemo_file_name or "/" in self.nemo_file_name:
            raise config_fault(f"{key}.nemo_file_name", self.nemo_file_name, "a file name such as megatron_gpt.nemo")


@dataclasses.dataclass(frozen=True)
class ConversionModel:
    checkpoint_folder: str  # the training run's checkpoints/ folder, or one step-<N> folder in it
    hparams_file: str  # the training job's resolved config (<train_dir>/<run.name>_hydra.yaml)
    checkpoint_name: str = "latest"  # latest: newest complete step-<N>; or a folder name such as step-40
    model_type: Literal["gpt"] = "gpt"
    tensor_model_parallel_size: int = 1  # TP of the .nemo (and of this job)
    pipeline_model_parallel_size: int = 1  # PP of the .nemo
    model_parallel_size: Optional[int] = None  # TP x PP, for the launcher's node count; checked if set
    vocab_file: Optional[str] = None  # replaces model.tokenizer.vocab_file of training; null = as trained
    merge_file: Optional[str] = None  # replaces model.tokenizer.merge_file
    tokenizer_model: Optional[str] = None  # replaces model.tokenizer.model (SentencePiece or tokenizer.json)

    def check(self, key: str) -> None:
        positive_fields(self, key, "tensor_model_parallel_size", "pipeline_model_parallel_size")
        tp, pp = self.tensor_model_parallel_size, self.pipeline_model_parallel_size
        if self.model_parallel_size is not None and self.model_parallel_size != tp * pp:
            raise config_fault(f"{key}.model_parallel_size", self.model_parallel_size, f"must equal TP({tp}) x PP({pp}) = {tp * pp}")
        for name in ("checkpoint_folder", "hparams_file"):
            if not Path(getattr(self, name)).is_absolute():
                raise config_fault(f"{key}.{name}", getattr(self, name), "must be an absolute path")


@dataclasses.dataclass(frozen=True)
class HFSection:
    mode: Literal["auto", "required", "off"] = "auto"  # auto: export if an architecture matches, else say why
    output_dir: Optional[str] = None  # null = <run.results_dir>/results/hf
    dtype: Optional[Literal["float32", "bfloat16", "float16"]] = None  # null = the dtype the model was trained in


@dataclasses.dataclass(frozen=True)
class ConversionConfig:
    run: ConversionRun
    model: ConversionModel
    hf: HFSection = HFSection()

    def check(self, key: str) -> None:
        processes = self.run.nodes * self.run.ntasks_per_node
        tp, pp = self.model.tensor_model_parallel_size, self.model.pipeline_model_parallel_size
        if processes % (tp * pp):
            raise config_fault(f"{key}.run.ntasks_per_node", self.run.ntasks_per_node,
                               f"nodes({self.run.nodes}) x ntasks_per_node({self.run.ntasks_per_node}) = {processes} processes "
                               f"cannot hold TP({tp}) x PP({pp}) = {tp * pp} ranks evenly; make it a multiple")

    def reads(self) -> List[Tuple[str, str]]:
        return [(f"{STAGE}.model.checkpoint_folder", self.model.checkpoint_folder),
                (f"{STAGE}.model.hparams_file", self.model.hparams_file)]

    def writes(self) -> List[str]:
        return [self.run.results_dir, str(self.hf_dir)]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], stage: str = STAGE) -> "ConversionConfig":
        return bind_stage(cls, data, stage)

    @property
    def nemo_path(self) -> Path:
        return Path(self.run.results_dir) / "results" / self.run.nemo_file_name

    @property
    def hf_dir(self) -> Path:
        return Path(self.hf.output_dir) if self.hf.output_dir else Path(self.run.results_dir) / "results" / "hf"
