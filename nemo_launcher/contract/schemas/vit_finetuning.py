"""Schema of the resolved `fine_tuning` section of the ViT family (conf/_family/vit_finetuning.yaml): the seed's
ImageNet-1K fine-tuning of a pretrained ViT `.nemo`. The tower's weights are restored, its learned positions
interpolated to the new resolution (img_h x img_w), and a new head (one linear layer by default) is trained with
the rest, by SGD with momentum; the run writes its own `.nemo`
(exp_manager: <explicit_log_dir>/checkpoints/<name>.nemo).

    cfg = VitFinetuneConfig.from_dict(section, "fine_tuning")    # the launcher before submitting; the job at start

The architecture (layers, widths, heads, patch size, class tokens) is the `.nemo`'s; patch_dim here is checked
against it by the job, since the launcher cannot open a file that an earlier stage of the pipeline writes.
"""

import dataclasses
from typing import Literal

from ..binding import field_fault, fraction, positive_fields
from .common_training import BuildSettings, OptimSection
from .common_tuning import FinetuningStage
from .vision_training import check_parallel, check_patch_tiling
from .vit_training import ClassFolderData, check_classifier_run

STAGE = "fine_tuning"
NEMO_HINT = (
    "a finished ViT training run writes <train dir>/results/checkpoints/nemo_vit_classification.nemo, the "
    "conversion stage <train dir>/convert_nemo/results/nemo_vit.nemo"
)


@dataclasses.dataclass(frozen=True)
class VitFinetuneOptim(OptimSection):
    name: Literal["sgd", "fused_adam", "adamw", "distributed_fused_adam"]  # the seed: sgd
    momentum: float = 0.9  # SGD's momentum; the Adams read betas instead

    def check(self, key: str) -> None:
        super().check(key)
        if not 0.0 <= self.momentum < 1.0:
            raise field_fault(self, key, "momentum", "must be in [0, 1), e.g. 0.9")


@dataclasses.dataclass(frozen=True)
class VitFinetuneModel(BuildSettings):
    restore_from_path: str  # the pretrained ViT .nemo
    micro_batch_size: int  # images per forward pass per data-parallel rank
    global_batch_size: int  # images per optimizer step over all data-parallel ranks
    optim: VitFinetuneOptim
    data: ClassFolderData  # [training folder, validation folder] in ImageNet's layout
    num_classes: int = 1000  # outputs of the new head; must equal the class folders of data_path[0]
    img_h: int = 384  # fine-tuning resolution in pixels; the learned positions are interpolated to it
    img_w: int = 384
    patch_dim: int = 16  # must equal the pretrained model's (checked by the job against the .nemo)
    head_type: Literal["linear", "mlp"] = "linear"  # the seed: a single linear layer (pretraining: mlp)
    hidden_dropout: float = 0.1  # replaces the pretraining value while fine-tuning
    attention_dropout: float = 0.0
    tensor_model_parallel_size: int = 1  # any TP dividing the heads; the .nemo is resharded on load
    pipeline_model_parallel_size: int = 1  # must be 1 (no pipeline stages for ViT)
    megatron_amp_O2: bool = True  # half-precision weights, fp32 master copies (must be true with bf16/16)

    def check(self, key: str) -> None:
        if not self.restore_from_path:
            raise field_fault(self, key, "restore_from_path", f"name the ViT .nemo to fine-tune ({NEMO_HINT})")
        positive_fields(self, key, "img_h", "img_w", "patch_dim")
        check_parallel(self, key)
        check_patch_tiling(self, key)
        if self.num_classes < 2:
            raise field_fault(self, key, "num_classes", "a classifier needs at least 2 classes")
        fraction(f"{key}.hidden_dropout", self.hidden_dropout)
        fraction(f"{key}.attention_dropout", self.attention_dropout)


@dataclasses.dataclass(frozen=True)
class VitFinetuneConfig(FinetuningStage, stage=STAGE):
    model: VitFinetuneModel

    def check(self, key: str) -> None:
        check_classifier_run(self.model, self.trainer, key)

    def reads(self) -> list[tuple[str, str]]:
        key = f"{STAGE}.model"
        return [(f"{key}.restore_from_path", self.model.restore_from_path)] + [
            (f"{key}.data.data_path", folder) for folder in self.model.data.data_path
        ]
