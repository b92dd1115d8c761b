"""Schemas of the Stable Diffusion family's export (conf/export/stable_diffusion/export_stable_diffusion.yaml,
conf/export/dreambooth/export_dreambooth.yaml, conf/export/instruct_pix2pix/export_instruct_pix2pix.yaml): the
networks of a `.nemo` as ONNX graphs of fixed shapes, each checked under onnxruntime against the network itself,
TensorRT engines where TensorRT builds them, and the Triton model repository entry that serves the whole pipeline.

    cfg = SdExportConfig.from_dict(section, "export")      # stable_diffusion, dreambooth: text -> images
    cfg = EditExportConfig.from_dict(section, "export")    # instruct_pix2pix: image + instruction -> images

The seed fixes every graph's batch at `num_images_per_prompt` (infer: or edit:), so an engine serves that many
images per request and no other count. Writes into `out_path`: `onnx/` (the graphs), `plan/` (engines where built,
and INFER_CONFIG_FILE: the inference settings that become the served defaults), `model_repo/<SD_MODEL or
EDIT_MODEL>/` (Triton's layout) and EXPORT_REPORT_FILE with what was checked.
"""

import dataclasses

from ..binding import StageSchema, absolute_path_fields, config_fault, field_fault, positive
from .sd_inference import EditSection, InferenceModel, InferenceRun, InferSection
from .vision_export import EXPORT_REPORT_FILE, INFER_CONFIG_FILE, ExportTrainer

STAGE = "export"
# Triton model names as the seed's deployment step names them (DreamBooth is served as stable_diffusion).
SD_MODEL, EDIT_MODEL = "stable_diffusion", "instruct_pix2pix"

__all__ = ["EDIT_MODEL", "EXPORT_REPORT_FILE", "EditExportConfig", "INFER_CONFIG_FILE", "SD_MODEL", "SdExportConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)  # keyword-only: they follow the inherited sections' required keys
class _ExportPlaces:
    """Where the export writes and how closely its graphs must agree with the networks."""

    check_tolerance: float = 1.0e-3  # largest allowed |onnxruntime - framework| over every checked graph output
    # Also write the Triton entry into this folder (the seed's <launcher>/deployment/server); null: only model_repo/
    deployment_dir: str | None = None

    def _check_places(self, key: str, out_key: str) -> None:
        """`out_key` names the section's output folder field (the infer and edit sections spell it differently)."""
        positive(f"{key}.check_tolerance", self.check_tolerance)
        absolute_path_fields(self, key, out_key, "deployment_dir")


@dataclasses.dataclass(frozen=True)
class ExportInferSection(InferSection, _ExportPlaces):
    """The seed's `infer:` keys; num_images_per_prompt is every graph's batch, height and width the images'."""

    def check(self, key: str) -> None:
        super().check(key)
        if not self.out_path:
            raise field_fault(self, key, "out_path", "name the folder of onnx/, plan/ and model_repo/")
        self._check_places(key, "out_path")


@dataclasses.dataclass(frozen=True)
class ExportEditSection(EditSection, _ExportPlaces):
    """The seed's `edit:` keys. The example image `input` fixes the graphs' image size (resized as edit_cli resizes
    it); the served pipeline scales every request's image to that size. `outpath` holds onnx/, plan/, model_repo/."""

    def check(self, key: str) -> None:
        super().check(key)
        self._check_places(key, "outpath")


@dataclasses.dataclass(frozen=True)
class _SdExport(StageSchema, stage=STAGE):
    run: InferenceRun
    trainer: ExportTrainer  # precision names the TensorRT engines' arithmetic (16: FP16, 32: FP32); graphs are fp32
    model: InferenceModel

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.model.restore_from_path", self.model.restore_from_path)]

    def writes(self) -> list[str]:
        places = self.places
        return [self.run.results_dir, self.out_path] + ([places.deployment_dir] if places.deployment_dir else [])

    def uses_gpus(self) -> bool:
        """TensorRT builds its engines on a GPU; the ONNX export and its check need none."""
        return self.trainer.accelerator == "gpu"


@dataclasses.dataclass(frozen=True)
class SdExportConfig(_SdExport):
    infer: ExportInferSection

    @property
    def out_path(self) -> str:
        return self.infer.out_path

    @property
    def places(self) -> _ExportPlaces:
        return self.infer

    def check(self, key: str) -> None:
        if self.infer.unconditional_guidance_scale is None:
            raise config_fault(
                f"{key}.infer.unconditional_guidance_scale", None, "set the served default guidance scale, e.g. 7.5"
            )


@dataclasses.dataclass(frozen=True)
class EditExportConfig(_SdExport):
    edit: ExportEditSection

    @property
    def out_path(self) -> str:
        return self.edit.outpath

    @property
    def places(self) -> _ExportPlaces:
        return self.edit

    def reads(self) -> list[tuple[str, str]]:
        return super().reads() + [(f"{STAGE}.edit.input", self.edit.input)]
