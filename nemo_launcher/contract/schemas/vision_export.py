"""Schemas of the vision families' export (conf/export/vit/export_vit.yaml, conf/export/clip/export_clip.yaml):
a saved model (`.nemo`) as ONNX graphs with a dynamic batch of 1..infer.max_batch_size, checked under onnxruntime
against the model itself, TensorRT engines where TensorRT imports, and Triton model repository entries.

    cfg = VitExportConfig.from_dict(section, "export")
    cfg = ClipExportConfig.from_dict(section, "export")

Writes into infer.out_path: `onnx/` (the graphs), `plan/` (engines where built, and INFER_CONFIG_FILE, the
inference settings that become the served defaults) and `model_repo/` (Triton's layout: vit_trt, or
clip_vision_trt and clip_trt), plus EXPORT_REPORT_FILE with what was checked.
"""

import dataclasses

from ..binding import absolute_path_fields, field_fault, positive, positive_fields
from .vision_inference import SavedModelJob, SavedModelTrainer

STAGE = "export"
INFER_CONFIG_FILE = "infer_config.yaml"
EXPORT_REPORT_FILE = "export_report.json"
# Triton model names as the seed's deployment step names them.
VIT_MODEL, CLIP_VISION_MODEL, CLIP_MODEL = "vit_trt", "clip_vision_trt", "clip_trt"


@dataclasses.dataclass(frozen=True)
class ExportTrainer(SavedModelTrainer):
    """precision names the TensorRT engines' arithmetic (16: FP16, 32: FP32); the ONNX graphs are fp32."""

    def check(self, key: str) -> None:
        super().check(key)
        if self.precision is not None and self.dtype() == "bf16":
            raise field_fault(self, key, "precision", "TensorRT engines are built in 16 (FP16) or 32 (FP32)")


@dataclasses.dataclass(frozen=True)
class InferSection:
    out_path: str  # folder of onnx/, plan/ and model_repo/
    max_batch_size: int = 64  # the graphs and engines take batches of 1..max_batch_size
    max_dim: int = 224  # image side in pixels; must be the model's own (its position table is fixed)
    check_tolerance: float = 1.0e-4  # largest allowed |onnxruntime - framework| over the checked outputs
    # Also write the Triton entries into this folder (the seed's <launcher>/deployment/server); null: only model_repo/
    deployment_dir: str | None = None

    def check(self, key: str) -> None:
        positive_fields(self, key, "max_batch_size", "max_dim")
        positive(f"{key}.check_tolerance", self.check_tolerance)
        absolute_path_fields(self, key, "out_path", "deployment_dir")


@dataclasses.dataclass(frozen=True)
class ClipInferSection(InferSection):
    max_text: int = 64  # tokens per text the text graph takes (start and end tokens included)

    def check(self, key: str) -> None:
        super().check(key)
        if self.max_text < 3:
            raise field_fault(
                self, key, "max_text", "needs room for the start token, one token and the end token: at least 3"
            )


@dataclasses.dataclass(frozen=True)
class _VisionExport(SavedModelJob, stage=STAGE):
    trainer: ExportTrainer

    def writes(self) -> list[str]:
        written = super().writes() + [self.infer.out_path]
        return written + ([self.infer.deployment_dir] if self.infer.deployment_dir else [])

    def uses_gpus(self) -> bool:
        """TensorRT builds its engines on a GPU; ONNX export and its check need none."""
        return self.trainer.accelerator == "gpu"


@dataclasses.dataclass(frozen=True)
class VitExportConfig(_VisionExport):
    infer: InferSection


@dataclasses.dataclass(frozen=True)
class ClipExportConfig(_VisionExport):
    infer: ClipInferSection
