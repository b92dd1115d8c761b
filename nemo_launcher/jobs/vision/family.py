"""The per-family record the vision wing works from, so that its code never asks which family a model is:

    family = family_record("clip")            # from a .nemo's vision_saved_model.family, or a training recipe
    family = family_for_model_type("vit_classification")   # from a conversion config's model.model_type
    config, build = family.chunk_builder(model_section, "fp32", on_gpu, initialize=False, tokenizer=None)

Each vision family's package provides its record as VISION_FAMILY in `nemo_launcher.jobs.<family>.vision_family`
(vit/vision_family.py, clip/vision_family.py). The wing finds a record by the family's name, read from the
archive or the config, through FAMILY_PACKAGES: the only place here that lists the families, and the row a third
vision family adds. A lookup imports the family's module by that name, so this package imports no family package
(tests/test_layering.py holds it); the record's functions live in the family package and import what they need.
"""

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from ..common.config import JobConfigError

# The packages under nemo_launcher.jobs with a vision_family module, in the order conversion tries them.
FAMILY_PACKAGES = ("vit", "clip")


@dataclasses.dataclass(frozen=True)
class VisionFamily:
    name: str  # the package, and the `vision_saved_model.family` entry of its .nemo: "vit"
    display_name: str  # in messages: "ViT"
    model_types: tuple[str, ...]  # the conversion config's model.model_type values that name this family
    conversion_schema: str  # its conversion config's class in nemo_launcher.contract.schemas.vision_conversion
    training_schema: Callable[[], type]  # () -> the training config's schema (imported when asked)
    model_schema: Callable[[], type]  # () -> the `model:` section's schema
    training_nemo: str  # the file a finished training run writes under <explicit_log_dir>/checkpoints/
    # (model section) -> [(key prefix in messages, tower section)]: the towers whose heads TP must divide
    towers: Callable[[Any], list[tuple[str, Any]]]
    image_tower: Callable[[Any], Any]  # (model section) -> the section with img_h, img_w, image_mean, image_std
    default_mean: Sequence[float]  # per-channel pixel normalisation when the section sets none
    default_std: Sequence[float]
    # (model section, precision, on_gpu, initialize, tokenizer) -> (TransformerConfig, build function of one chunk)
    chunk_builder: Callable[..., tuple[Any, Callable]]
    reads_text: bool = False  # a text tower: a caption tokenizer, a vocabulary, text_length tokens per caption
    text_length: Callable[[Any], int | None] = lambda model: None  # (model section) -> tokens per caption
    # A classifier: (model config mapping) -> the class folder names it was trained on, when still readable;
    # its .nemo records them. None: not a classifier.
    class_names: Callable[[Any], list[str] | None] | None = None
    # (model config mapping) -> Hugging Face class name, or HFExportError saying why there is none
    hf_architecture: Callable[[Any], str] | None = None
    export_hf: Callable[..., str] | None = None  # (model config, full state, hf_dir, dtype) -> class name written
    # (model section) -> the width of the output each exported graph returns (classes, embedding size)
    output_width: Callable[[Any], int] = lambda model: 0
    # The export's Triton entries: (cfg, saved model, {graph name: Graph}, model_file(graph) -> Path (engine or
    # ONNX graph), onnx_dir, repository, settings) -> [entry folders]; vision/export.py calls it with the graphs it
    # has written and checked.
    triton_entries: Callable[..., list[Any]] | None = None

    @property
    def classifies(self) -> bool:
        return self.class_names is not None


def family_record(name: str) -> VisionFamily:
    """The record of family `name` (a package in FAMILY_PACKAGES); JobConfigError for any other name."""
    if name not in FAMILY_PACKAGES:
        raise JobConfigError(f"vision family {name!r} is not one of {', '.join(FAMILY_PACKAGES)}")
    return importlib.import_module(f"nemo_launcher.jobs.{name}.vision_family").VISION_FAMILY


def family_for_model_type(model_type: str) -> VisionFamily | None:
    """The family whose conversion config says model.model_type: `model_type`; None when none does."""
    for name in FAMILY_PACKAGES:
        record = family_record(name)
        if model_type in record.model_types:
            return record
    return None
