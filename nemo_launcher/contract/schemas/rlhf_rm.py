"""Schema of the resolved `rlhf_rm` section (conf/rlhf_rm/gpt3/*.yaml): a GPT reward model trained on preference
pairs from an SFT `.nemo` (jobs/gpt/rlhf_rm.py).

    cfg = RewardModelConfig.from_dict(section, "rlhf_rm")
    cfg.reads(), cfg.writes(), cfg.data_parallel_size(world_size)
    cfg.sized_by_epochs(train_pairs)      # the job, for a run sized in trainer.max_epochs (core/run_length.py)

The keys are the reference launcher's (conf/rlhf_rm/gpt3/2b_rm.yaml) where our trainer honours them: trainer.rm holds
max_epochs, max_steps (-1: as many as max_epochs make), val_check_interval, save_interval, limit_val_batches,
limit_test_batches and gradient_clip_val, and the trainer keys the core reads interpolate from it
(trainer.max_steps: ${.rm.max_steps}, ...; exp_manager.checkpoint_callback_params.every_n_train_steps:
${...trainer.rm.save_interval}). The base model is
model.pretrained_checkpoint.restore_from_path; the data model.data.data_prefix {train, validation, test}: pairs files
(contract/preference_data.py), several per split read one after the other. Batch sizes count pairs: a micro-batch
of m pairs is 2m sequences, so a pair is never split. The architecture comes from the `.nemo`.
"""

import dataclasses
from typing import Any, Literal

from ..binding import bind_stage, config_fault, field_fault, fraction, no_pipeline_parallel, positive, positive_fields
from ..durations import WallClock
from ..epochs import EpochSizing
from .common_training import OptimSection, Precision, TrainerClock, check_layout, check_schedule, check_world_size
from .common_tuning import SftExpManager
from .run import RunBase

STAGE = "rlhf_rm"
# trainer.<key> the trainer core reads, each following trainer.rm.<key> (the reference's layout).
FOLLOWS_RM = (
    "max_epochs",
    "max_steps",
    "val_check_interval",
    "limit_val_batches",
    "limit_test_batches",
    "gradient_clip_val",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RmRun(RunBase):
    model_train_name: str | None = None  # the pre-training run whose SFT model this reward model starts from


@dataclasses.dataclass(frozen=True)
class RmSchedule:
    """trainer.rm: the reward model's run length and intervals (the reference's keys)."""

    max_epochs: int | None = 1  # passes over the training pairs; null: max_steps alone sizes the run
    max_steps: int = -1  # optimizer steps; -1: as many as max_epochs make (else the lesser of the two)
    val_check_interval: int = 100  # steps between validations (and after the last step)
    save_interval: int = 100  # steps between checkpoints (exp_manager.checkpoint_callback_params follows it)
    limit_val_batches: int = 50  # global batches of validation pairs per validation; 0 disables validation
    limit_test_batches: int = 50  # global batches of test pairs scored after the last step; 0: none
    gradient_clip_val: float | None = 1.0  # max global L2 norm of the gradients; null or 0 = no clipping

    def check(self, key: str) -> None:
        if self.max_steps == -1:
            if self.max_epochs is None:
                raise field_fault(
                    self, key, "max_steps", "-1 runs max_epochs passes, and max_epochs is null: set one of them"
                )
        elif self.max_steps < 1:
            raise field_fault(self, key, "max_steps", "optimizer steps: a positive number, or -1 to follow max_epochs")
        if self.max_epochs is not None:
            positive(f"{key}.max_epochs", self.max_epochs)
        positive_fields(self, key, "val_check_interval", "save_interval")
        for name in ("limit_val_batches", "limit_test_batches"):
            if getattr(self, name) < 0:
                raise field_fault(self, key, name, "must be >= 0 (0: none)")


@dataclasses.dataclass(frozen=True)
class RmTrainer(TrainerClock):
    num_nodes: int  # machines; num_nodes x devices must equal the number of processes started
    devices: int  # processes (GPUs) per machine
    accelerator: Literal["gpu", "cpu"]
    precision: Precision
    rm: RmSchedule
    # What the trainer core reads; each follows trainer.rm (set those). After the job sizes a run in epochs,
    # max_steps holds the derived steps and max_epochs null.
    max_steps: int | None
    max_epochs: int | None = None
    val_check_interval: int = 100
    limit_val_batches: int = 50
    limit_test_batches: int = 50
    gradient_clip_val: float | None = 1.0
    log_every_n_steps: int = 10
    max_time: WallClock | None = None  # "DD:HH:MM:SS" of wall time per process start; then save and exit 0

    def check(self, key: str) -> None:
        positive_fields(self, key, "num_nodes", "devices", "log_every_n_steps")
        for name in FOLLOWS_RM:
            if getattr(self, name) != getattr(self.rm, name):
                raise config_fault(
                    f"{key}.{name}",
                    getattr(self, name),
                    f"differs from {key}.rm.{name}={getattr(self.rm, name)!r}; set {key}.rm.{name} "
                    f"({key}.{name} follows it, as in the reference's ${{.rm.{name}}})",
                )

    def sized_in_steps(self) -> bool:
        """Whether max_steps alone sizes the run (no epochs to count)."""
        return self.max_epochs is None


@dataclasses.dataclass(frozen=True)
class PretrainedCheckpoint:
    restore_from_path: str  # the .nemo the reward model starts from: an SFT GPT (or a reward model to train on)


@dataclasses.dataclass(frozen=True)
class DataPrefix:
    """Pairs files per split (<dir>/<split>_pairs.jsonl of a preference directory); several are read in turn."""

    train: list[str]
    validation: list[str] | None = None  # needed when trainer.rm.limit_val_batches > 0
    test: list[str] | None = None  # held out: scored once after the last step (pairwise accuracy and margin)

    def check(self, key: str) -> None:
        for name in ("train", "validation", "test"):
            files = getattr(self, name)
            if files is not None and (not files or not all(files)):
                raise field_fault(self, key, name, "list one or more pairs files, e.g. [/data/prefs/train_pairs.jsonl]")

    def splits(self) -> dict[str, list[str]]:
        return {name: files for name in ("train", "validation", "test") if (files := getattr(self, name))}


@dataclasses.dataclass(frozen=True)
class RmData:
    data_prefix: DataPrefix
    num_workers: int = 0  # DataLoader worker processes per rank

    def check(self, key: str) -> None:
        if self.num_workers < 0:
            raise field_fault(self, key, "num_workers", "must be >= 0")


@dataclasses.dataclass(frozen=True)
class RmModel:
    pretrained_checkpoint: PretrainedCheckpoint
    global_batch_size: int  # pairs per optimizer step over all data-parallel ranks
    micro_batch_size: int  # pairs per forward pass per rank (2 x micro_batch_size sequences)
    optim: OptimSection
    data: RmData
    # Longest prompt + response in tokens; a longer pair is refused (jobs/rlhf/pairs.py), never cut. At most the
    # .nemo's max_position_embeddings.
    encoder_seq_length: int = 4096
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; a .nemo of another layout is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1
    seed: int = 1234  # the fresh head's initialisation and the order of the pairs
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0

    def check(self, key: str) -> None:
        if not self.pretrained_checkpoint.restore_from_path:
            raise config_fault(
                f"{key}.pretrained_checkpoint.restore_from_path",
                self.pretrained_checkpoint.restore_from_path,
                "name the .nemo the reward model starts from (the fine_tuning stage's SFT model)",
            )
        positive_fields(self, key, "global_batch_size", "micro_batch_size", "tensor_model_parallel_size")
        no_pipeline_parallel(
            self,
            key,
            "the reward model trains without pipeline parallelism (its scalar head sits on the one stage): set 1 "
            "and split a large model with tensor_model_parallel_size",
        )
        if self.encoder_seq_length < 2:
            raise field_fault(self, key, "encoder_seq_length", "must be >= 2 (a prompt token and a response token)")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


@dataclasses.dataclass(frozen=True)
class RewardModelConfig:
    run: RmRun
    trainer: RmTrainer
    exp_manager: SftExpManager
    model: RmModel

    stage = STAGE

    def check(self, key: str) -> None:
        check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, key)
        if self.trainer.sized_in_steps():
            check_schedule(self.model, self.trainer, key)
        if self.trainer.limit_val_batches and self.model.data.data_prefix.validation is None:
            raise config_fault(
                f"{key}.model.data.data_prefix.validation",
                None,
                "validation (trainer.rm.limit_val_batches > 0) needs held-out pairs: list validation pairs files, "
                "or set trainer.rm.limit_val_batches 0",
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], stage: Literal["rlhf_rm"] = STAGE) -> "RewardModelConfig":
        return bind_stage(cls, data, stage)

    def sized_by_epochs(self, samples: int, key: str = STAGE):
        """(this config sized in steps, its EpochSizing) for a run with trainer.max_epochs over `samples` training
        pairs: max_epochs x samples / global batch steps, or trainer.max_steps when that is fewer (the reference's
        trainer stops at whichever comes first). The schedule is checked against the result."""
        trainer = self.trainer
        sizing = EpochSizing(trainer.max_epochs, samples, self.model.global_batch_size)
        sizing.check(f"{key}.model.data.data_prefix.train")
        steps = sizing.max_steps if trainer.max_steps in (None, -1) else min(trainer.max_steps, sizing.max_steps)
        sized = dataclasses.replace(self, trainer=dataclasses.replace(trainer, max_steps=steps, max_epochs=None))
        check_schedule(sized.model, sized.trainer, key, sizing)
        return sized, sizing

    def reads(self) -> list[tuple[str, str]]:
        key = f"{STAGE}.model"
        found = [(f"{key}.pretrained_checkpoint.restore_from_path", self.model.pretrained_checkpoint.restore_from_path)]
        for split, files in self.model.data.data_prefix.splits().items():
            found += [(f"{key}.data.data_prefix.{split}", name) for name in files]
        return found

    def writes(self) -> list[str]:
        return [self.exp_manager.explicit_log_dir]

    def data_parallel_size(self, world_size: int) -> int:
        check_world_size(self.trainer, world_size, STAGE)
        return check_layout(self.model, self.trainer.num_nodes, self.trainer.devices, STAGE)

    def nemo_path(self) -> str:
        """The reward-model .nemo the job writes after its last step (the critic and the reward server load it)."""
        return self.exp_manager.nemo_path()
