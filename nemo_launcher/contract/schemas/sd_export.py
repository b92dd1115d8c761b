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
from typing import ClassVar

from ..binding import absolute_path_fields, config_fault, field_fault, positive
from .run import SavedModelStage
from .sd_inference import EditSection, InferenceModel, InferenceRun, InferSection
from .vision_export import EXPORT_REPORT_FILE, INFER_CONFIG_FILE, ExportTrainer

STAGE = "export"
# Triton model names as the seed's deployment step names them (DreamBooth is served as stable_diffusion).
SD_MODEL, EDIT_MODEL = "stable_diffusion", "instruct_pix2pix"

__all__ = ["EDIT_MODEL", "EXPORT_REPORT_FILE", "EditExportConfig", "INFER_CONFIG_FILE", "SD_MODEL", "SdExportConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)  # keyword-only: they follow the inherited sections' required keys
class _ExportPlaces:
    """Where the export writes and how closely its graphs must agree with the networks. `out_key` names the section's
    output folder key (the infer and edit sections spell it differently)."""

    out_key: ClassVar[str]
    check_tolerance: float = 1.0e-3  # largest allowed |onnxruntime - framework| over every checked graph output
    # Also write the Triton entry into this folder (the seed's <launcher>/deployment/server); null: only model_repo/
    deployment_dir: str | None = None

    @property
    def out_dir(self) -> str:
        return getattr(self, self.out_key)

    def _check_places(self, key: str) -> None:
        positive(f"{key}.check_tolerance", self.check_tolerance)
        absolute_path_fields(self, key, self.out_key, "deployment_dir")


@dataclasses.dataclass(frozen=True)
class ExportInferSection(InferSection, _ExportPlaces):
    """The seed's `infer:` keys; num_images_per_prompt is every graph's batch, height and width the images'."""

    out_key = "out_path"

    def check(self, key: str) -> None:
        super().check(key)
        if not self.out_path:
            raise field_fault(self, key, "out_path", "name the folder of onnx/, plan/ and model_repo/")
        self._check_places(key)


@dataclasses.dataclass(frozen=True)
class ExportEditSection(EditSection, _ExportPlaces):
    """The seed's `edit:` keys. The example image `input` fixes the graphs' image size (resized as edit_cli resizes
    it); the served pipeline scales every request's image to that size. `outpath` holds onnx/, plan/, model_repo/."""

    out_key = "outpath"

    def check(self, key: str) -> None:
        super().check(key)
        self._check_places(key)


@dataclasses.dataclass(frozen=True)
class _SdExport(SavedModelStage, stage=STAGE):
    places_key: ClassVar[str]  # the section of the export's places: infer (text2img) or edit (instruct_pix2pix)
    run: InferenceRun
    trainer: ExportTrainer  # precision names the TensorRT engines' arithmetic (16: FP16, 32: FP32); graphs are fp32
    model: InferenceModel

    @property
    def places(self) -> _ExportPlaces:
        return getattr(self, self.places_key)

    @property
    def out_path(self) -> str:
        return self.places.out_dir

    def writes(self) -> list[str]:
        places = self.places
        return [self.run.results_dir, self.out_path] + ([places.deployment_dir] if places.deployment_dir else [])

    def uses_gpus(self) -> bool:
        """TensorRT builds its engines on a GPU; the ONNX export and its check need none."""
        return self.trainer.accelerator == "gpu"


@dataclasses.dataclass(frozen=True)
class SdExportConfig(_SdExport):
    places_key = "infer"
    infer: ExportInferSection

    def check(self, key: str) -> None:
        if self.infer.unconditional_guidance_scale is None:
            raise config_fault(
                f"{key}.infer.unconditional_guidance_scale", None, "set the served default guidance scale, e.g. 7.5"
            )


@dataclasses.dataclass(frozen=True)
class EditExportConfig(_SdExport):
    places_key = "edit"
    edit: ExportEditSection

    def input_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.edit.input", self.edit.input)]
