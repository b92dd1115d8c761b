"""ViT's record for the vision wing (vision/family.py): how its model is built, which towers it has, what its
archive keeps. The image classifier has no Hugging Face counterpart here and reads no text."""

import os
from collections.abc import Mapping
from typing import Any

from ...contract.schemas.vision_training import IMAGENET_MEAN, IMAGENET_STD
from ..vision.family import VisionFamily


def _training_schema():
    from ...contract.schemas.vit_training import VitTrainingConfig

    return VitTrainingConfig


def _model_schema():
    from ...contract.schemas.vit_training import VitModelSection

    return VitModelSection


def _chunk_builder(model, precision: str, on_gpu: bool, initialize: bool, tokenizer=None):
    from .model import transformer_config, vit_chunk  # deferred: megatron-core loads with the model

    return transformer_config(model, precision, on_gpu, False), vit_chunk


def _hf_architecture(model_config: Mapping[str, Any]) -> str:
    from ..core.conversion import HFExportError  # deferred: the conversion flow imports torch

    raise HFExportError("the ViT classifier has no Hugging Face counterpart here")


def class_names(model_config: Mapping[str, Any]) -> list[str] | None:
    """The class folder names a ViT was trained on, when its training folder is still readable from here."""
    paths = (model_config.get("data") or {}).get("data_path") or []
    if not paths or not os.path.isdir(paths[0]):
        return None
    return sorted(name for name in os.listdir(paths[0]) if os.path.isdir(os.path.join(paths[0], name)))


def _triton_entries(cfg, saved, graphs, model_file, onnx_dir, repository, settings):
    """vit_trt: the classifier's engine or ONNX graph, served by Triton's own backend."""
    from ...contract.schemas.vision_export import VIT_MODEL
    from ..vision.export import tensor_specs  # deferred: the export's modules load only for an export
    from ..vision.triton_entries import write_graph_entry

    graph = graphs["vit"]
    return [
        write_graph_entry(
            repository, VIT_MODEL, model_file(graph), *tensor_specs(saved, graph), cfg.infer.max_batch_size
        )
    ]


VISION_FAMILY = VisionFamily(
    name="vit",
    display_name="ViT",
    model_types=("vit_classification",),
    conversion_schema="VitConversionConfig",
    training_schema=_training_schema,
    model_schema=_model_schema,
    training_nemo="nemo_vit_classification.nemo",
    towers=lambda model: [("", model)],
    image_tower=lambda model: model,
    default_mean=IMAGENET_MEAN,
    default_std=IMAGENET_STD,
    chunk_builder=_chunk_builder,
    class_names=class_names,
    hf_architecture=_hf_architecture,
    output_width=lambda model: model.num_classes,
    triton_entries=_triton_entries,
)
