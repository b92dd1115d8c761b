"""Sections every fine-tuning schema shares (gpt_sft, t5_finetuning): the run of a tuning job that starts
from a converted `.nemo`, its trainer and where it writes the tuned model."""
import dataclasses
from typing import Literal, Optional

from ..binding import config_fault, positive_fields
from .common_training import Precision, precision_name
from .run import RunBase


@dataclasses.dataclass(frozen=True, kw_only=True)
class SftRun(RunBase):
    task_name: str  # names the results folder and the job
    model_train_name: Optional[str] = None  # the pre-training run whose converted model is tuned
    convert_name: Optional[str] = None  # the conversion folder under that run
    convert_dir: Optional[str] = None  # <base_results_dir>/<model_train_name>/<convert_name>


@dataclasses.dataclass(frozen=True)
class SftTrainer:
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]
    precision: Precision
    max_steps: int  # optimizer steps
    log_every_n_steps: int = 10
    val_check_interval: int = 200  # steps between validations; validation also runs after the last step
    limit_val_batches: int = 8  # global batches per validation; 0 disables validation
    gradient_clip_val: Optional[float] = None  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices", "max_steps", "log_every_n_steps", "val_check_interval")
        if self.limit_val_batches < 0:
            raise config_fault(f"{key}.limit_val_batches", self.limit_val_batches, "must be >= 0 (0 disables validation)")

    def precision_name(self) -> str:
        return precision_name(self.precision)


@dataclasses.dataclass(frozen=True)
class SftExpManager:
    explicit_log_dir: str  # metrics.jsonl here; the result in <explicit_log_dir>/checkpoints/
    name: str  # file name of the result: checkpoints/<name>.nemo

    def nemo_path(self, suffix: str = "") -> str:
        return f"{self.explicit_log_dir}/checkpoints/{self.name}{suffix}.nemo"
