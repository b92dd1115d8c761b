"""Sections every tuning schema shares (gpt_sft, gpt_prompt_learning, t5_finetuning): the run of a tuning job
that starts from a converted `.nemo`, its trainer, and where it writes its checkpoints, logs and the tuned model.

Tuning runs on the trainer core (nemo_launcher/jobs/core), so the trainer and exp_manager sections carry what the
core reads of a pretraining run too: max_time, TensorBoard/W&B, resuming and the checkpoint schedule.
"""

import dataclasses
from typing import Any, Literal

from ..binding import field_fault, positive_fields
from ..checkpoint_damage import AllCheckpointsDamaged
from ..durations import WallClock
from .common_training import CheckpointParams, Precision, TrainerClock, TrainingStage
from .run import RunBase


@dataclasses.dataclass(frozen=True, kw_only=True)
class SftRun(RunBase):
    task_name: str  # names the results folder and the job
    model_train_name: str | None = None  # the pre-training run whose converted model is tuned
    convert_name: str | None = None  # the conversion folder under that run
    convert_dir: str | None = None  # <base_results_dir>/<model_train_name>/<convert_name>


@dataclasses.dataclass(frozen=True)
class SftTrainer(TrainerClock):
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]
    precision: Precision
    max_steps: int  # optimizer steps
    log_every_n_steps: int = 10
    val_check_interval: int = 200  # steps between validations; validation also runs after the last step
    limit_val_batches: int = 8  # global batches per validation; 0 disables validation
    gradient_clip_val: float | None = None  # max global L2 norm of the gradients; null or 0 = no clipping
    max_time: WallClock | None = None  # "DD:HH:MM:SS" of wall time per process start; then save and exit 0

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices", "max_steps", "log_every_n_steps", "val_check_interval")
        if self.limit_val_batches < 0:
            raise field_fault(self, key, "limit_val_batches", "must be >= 0 (0 disables validation)")


@dataclasses.dataclass(frozen=True)
class SftExpManager:
    explicit_log_dir: (
        str  # TensorBoard events and checkpoints/step-<N> here; the result in <explicit_log_dir>/checkpoints/
    )
    name: str  # file name of the result: checkpoints/<name>.nemo
    # Resumable checkpoints of the tuned parameters and their optimizer state; also saved at the end, at max_time and
    # on SIGTERM/SIGUSR1. A rerun continues from the newest complete one.
    checkpoint_callback_params: CheckpointParams = CheckpointParams(every_n_train_steps=200, save_top_k=2)
    create_checkpoint_callback: bool = True  # false: never save (signals and max_time then just stop)
    resume_if_exists: bool = True  # continue from the newest complete checkpoint in explicit_log_dir
    resume_ignore_no_checkpoint: bool = True  # false: resume_if_exists with no checkpoint is an error
    # No complete checkpoint matches the sizes and checksums its save recorded: fail (exit 74) or start over
    # (contract/checkpoint_damage.py). A damaged newest one with a sound older one always falls back to it.
    on_all_checkpoints_damaged: AllCheckpointsDamaged = "fail"
    create_tensorboard_logger: bool = True
    create_wandb_logger: bool = False  # needs the wandb package and wandb_api_key_file (or a prior `wandb login`)
    wandb_logger_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # passed to WandbLogger
    log_step_timing: bool = True  # log train_step_timing (seconds per step)

    def nemo_path(self, suffix: str = "") -> str:
        return f"{self.explicit_log_dir}/checkpoints/{self.name}{suffix}.nemo"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadSource:
    """A SQuAD v1.1-format JSON a preparation step reads. Where SQuAD cannot be had (the quick starts, tests), a
    stand-in: when `source` is missing, first write `sample_questions` generated questions there
    (jobs/t5/sample_squad.py: colours of things; the scores say nothing about SQuAD). null: read the file."""

    source: str  # the JSON as published (SQuAD train-v1.1.json, XQuAD xquad.<lang>.json)
    sample_questions: int | None = None

    def check(self, key: str) -> None:
        if self.sample_questions is not None and self.sample_questions < 1:
            raise field_fault(
                self, key, "sample_questions", "give a positive number of questions, or null to read the published file"
            )


@dataclasses.dataclass(frozen=True)
class FinetuningStage(TrainingStage, stage="fine_tuning"):
    """The sections a family's fine-tuning schema starts with (it adds its `model`), and the trainer's checks."""

    run: SftRun
    trainer: SftTrainer
    exp_manager: SftExpManager
