"""Schema of the resolved `training` section of the ViT family (conf/_family/vit_training.yaml): megatron-core's
vision tower (CLIPViTModel) with a classification head (one hidden layer, tanh) on its first class token, trained
with cross-entropy on images in ImageNet's class-folder layout.

    cfg = VitTrainingConfig.from_dict(section)     # the launcher before submitting; the trainer when it starts
    dp = cfg.data_parallel_size(world_size)        # the trainer, once it knows how many processes started

The run, trainer, exp_manager and optimizer sections are every family's (common_training); the tower's keys are
vision_training's.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, non_negative
from .common_training import (
    BuildSettings,
    OptimSection,
    TrainingSections,
    check_layout,
    check_schedule,
)
from .vision_training import VisionTower, check_amp_o2, check_parallel

STAGE = "training"


@dataclasses.dataclass(frozen=True)
class ClassFolderData:
    """ImageNet's layout (the seed's data/imagenet_1k): <folder>/<class name>/<image file>; classes are the
    sub-folders of the training folder in sorted order, so their index is the label."""

    data_path: list[
        str
    ]  # [training folder, validation folder]; the validation folder may be left out without validation
    num_workers: int = 2  # DataLoader worker processes per rank
    dataloader_type: Literal["single", "cyclic"] = "cyclic"  # single: folder order; cyclic: shuffled over the run
    random_crop_scale: list[float] = dataclasses.field(
        default_factory=lambda: [0.08, 1.0]
    )  # area range of training crops
    random_flip: bool = True  # mirror half of the training images left-right

    def check(self, key: str) -> None:
        non_negative(f"{key}.num_workers", self.num_workers)
        if not 1 <= len(self.data_path) <= 2:
            raise field_fault(
                self, key, "data_path", "expected [training folder] or [training folder, validation folder]"
            )
        low, high = (self.random_crop_scale + [0, 0])[:2]
        if len(self.random_crop_scale) != 2 or not 0 < low <= high <= 1:
            raise field_fault(
                self,
                key,
                "random_crop_scale",
                "expected [smallest, largest] share of the image area, 0 < smallest <= largest <= 1",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class VitModelSection(VisionTower, BuildSettings):
    micro_batch_size: int  # images per forward pass per data-parallel rank
    global_batch_size: int  # images per optimizer step over all data-parallel ranks
    optim: OptimSection
    data: ClassFolderData
    num_classes: int = 1000  # outputs of the head; must equal the class folders of data_path[0]
    # mlp: the seed's pretraining head (one hidden layer, tanh); linear: its fine-tuning head (vit_finetuning)
    head_type: Literal["mlp", "linear"] = "mlp"
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1  # must be 1 (the seed's feature matrix)
    megatron_amp_O2: bool = True  # half-precision weights, fp32 master copies (must be true with bf16/16)

    def check(self, key: str) -> None:
        super().check(key)
        check_parallel(self, key)
        if self.num_classes < 2:
            raise field_fault(self, key, "num_classes", "a classifier needs at least 2 classes")


def check_classifier_run(model, trainer, key: str) -> None:
    """What a ViT training and fine-tuning run check alike: precision, the validation folder, layout, schedule."""
    check_amp_o2(model, trainer, f"{key}.model")
    if trainer.limit_val_batches and len(model.data.data_path) < 2:
        raise config_fault(
            f"{key}.model.data.data_path",
            model.data.data_path,
            "validation (trainer.limit_val_batches > 0) reads the second folder: add it, or set limit_val_batches 0",
        )
    check_layout(model, trainer.num_nodes, trainer.devices, key)
    check_schedule(model, trainer, key)


@dataclasses.dataclass(frozen=True)
class VitTrainingConfig(TrainingSections):
    model: VitModelSection

    def check(self, key: str) -> None:
        check_classifier_run(self.model, self.trainer, key)
        if self.trainer.limit_test_batches:
            raise config_fault(
                f"{key}.trainer.limit_test_batches",
                self.trainer.limit_test_batches,
                "ImageNet's layout has no test split: set 0 (evaluation=vit/imagenet_val scores the validation folder)",
            )

    def reads(self) -> list[tuple[str, str]]:
        """(key, path) of what the trainer opens: the class folders."""
        return [(f"{STAGE}.model.data.data_path", folder) for folder in self.model.data.data_path]
