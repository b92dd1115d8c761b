"""Schemas of the resolved `evaluation` sections of the vision families: `vit/imagenet_val` (top-1 and top-5 of a
fine-tuned ViT on ImageNet's validation class folders) and `clip/imagenet_zeroshot` (CLIP's zero-shot top-1: each
class named in prompts, every image given the class whose prompts' text embedding is nearest its own).

    cfg = VitEvaluationConfig.from_dict(section)       # the launcher before submitting; the job when it starts

Both read a vision `.nemo` (jobs/vision/saved_models.py) and a folder in ImageNet's layout
(<imagenet_val>/<class folder>/<image>), and write <results_dir>/results/<task_name>_results.json. One process
scores every image (the seed's evaluation runs data-parallel size 1 as well); the model is loaded at TP 1.
"""

import dataclasses
from pathlib import Path
from typing import Literal

from ..binding import StageSchema, config_fault, field_fault, must_be_one, non_negative, positive_fields
from .common_training import Precision, precision_name
from .run import RunBase

STAGE = "evaluation"


@dataclasses.dataclass(frozen=True, kw_only=True)
class VisionEvaluationRun(RunBase):
    task_name: str  # names the results file and the job
    model_train_name: str | None = None  # the training run whose model is scored
    fine_tuning_dir: str | None = None  # that run's fine-tuning folder (ViT)
    nodes: int = 1  # must be 1: one process scores every image
    ntasks_per_node: int = 1  # must be 1

    def check(self, key: str) -> None:
        super().check(key)
        must_be_one(
            self,
            key,
            "nodes",
            "ntasks_per_node",
            fix="the vision evaluation runs in one process (the seed's too: data-parallel size 1): set 1",
        )


@dataclasses.dataclass(frozen=True)
class VisionEvaluationTrainer:
    devices: int = 1  # must be 1 (one process)
    num_nodes: int = 1  # must be 1
    accelerator: Literal["gpu", "cpu"] = "gpu"  # the job uses a GPU where one is visible
    precision: Precision | None = None  # the training precision (the seed: evaluate in it); null = as stored

    def check(self, key: str) -> None:
        must_be_one(
            self,
            key,
            "devices",
            "num_nodes",
            fix="the vision evaluation runs in one process (data-parallel size 1): set 1",
        )


@dataclasses.dataclass(frozen=True)
class ValidationFolder:
    imagenet_val: str  # ImageNet's validation set in class folders (the seed's data/imagenet_1k/val after valprep.sh)
    num_workers: int = 2  # DataLoader worker processes decoding images

    def check(self, key: str) -> None:
        non_negative(f"{key}.num_workers", self.num_workers)


@dataclasses.dataclass(frozen=True)
class VitEvaluationModel:
    restore_from_path: str  # the ViT .nemo scored (by default the fine-tuning stage's)
    data: ValidationFolder
    micro_batch_size: int = 512  # images per forward pass
    global_batch_size: int | None = None  # the seed's key; with one process it must equal micro_batch_size
    precision: Precision | None = None  # weights' dtype while scoring: bf16, 16, 32; null = as stored

    def check(self, key: str) -> None:
        positive_fields(self, key, "micro_batch_size")
        if self.global_batch_size is not None and self.global_batch_size != self.micro_batch_size:
            raise field_fault(
                self,
                key,
                "global_batch_size",
                f"one process scores the images: set it to micro_batch_size ({self.micro_batch_size}) or null",
            )

    def precision_name(self) -> str | None:
        return None if self.precision is None else precision_name(self.precision)


@dataclasses.dataclass(frozen=True)
class ClipZeroshotModel(VitEvaluationModel):
    # Prompt templates, each with one {} for the class name; a class's text embedding is the mean of its prompts'.
    prompts: list[str] = dataclasses.field(default_factory=lambda: ["a photo of a {}."])
    # Class names in the sorted order of the class folders; null: the folder names with _ read as spaces.
    class_names: list[str] | None = None

    def check(self, key: str) -> None:
        super().check(key)
        if not self.prompts or any(prompt.count("{}") != 1 for prompt in self.prompts):
            raise field_fault(
                self, key, "prompts", "list prompt templates with exactly one {} each, e.g. ['a photo of a {}.']"
            )
        if self.class_names is not None and not all(isinstance(n, str) and n.strip() for n in self.class_names):
            raise field_fault(self, key, "class_names", "list one non-empty name per class folder, or null")


class _VisionEvaluation(StageSchema, stage=STAGE):
    """What both evaluation schemas do alike (mixed into their frozen dataclasses)."""

    def check(self, key: str) -> None:
        precision = self.model.precision_name()
        if self.trainer.accelerator == "cpu" and precision not in (None, "fp32"):
            raise config_fault(
                f"{key}.model.precision",
                self.model.precision,
                "accelerator cpu scores in 32 (or null for the stored dtype); use a GPU for bf16/16",
            )

    def reads(self) -> list[tuple[str, str]]:
        return [
            (f"{STAGE}.model.restore_from_path", self.model.restore_from_path),
            (f"{STAGE}.model.data.imagenet_val", self.model.data.imagenet_val),
        ]

    def writes(self) -> list[str]:
        return [self.run.results_dir]

    @property
    def results_file(self) -> Path:
        return Path(self.run.results_dir) / "results" / f"{self.run.task_name}_results.json"


@dataclasses.dataclass(frozen=True)
class VitEvaluationConfig(_VisionEvaluation):
    run: VisionEvaluationRun
    model: VitEvaluationModel
    trainer: VisionEvaluationTrainer = VisionEvaluationTrainer()


@dataclasses.dataclass(frozen=True)
class ClipZeroshotConfig(_VisionEvaluation):
    run: VisionEvaluationRun
    model: ClipZeroshotModel
    trainer: VisionEvaluationTrainer = VisionEvaluationTrainer()
