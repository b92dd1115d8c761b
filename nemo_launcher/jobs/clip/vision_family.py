"""CLIP's record for the vision wing (vision/family.py): a vision and a text tower, a caption tokenizer, and a
Hugging Face counterpart (hf_export.py says when transformers' CLIPModel computes the same embeddings)."""

import dataclasses
import functools

from ...contract.schemas.vision_training import CLIP_MEAN, CLIP_STD
from ..vision.family import VisionFamily


def _training_schema():
    from ...contract.schemas.clip_training import ClipTrainingConfig

    return ClipTrainingConfig


def _model_schema():
    from ...contract.schemas.clip_training import ClipModelSection

    return ClipModelSection


def _chunk_builder(model, precision: str, on_gpu: bool, initialize: bool, tokenizer=None):
    from .model import clip_chunk, text_config, vision_config  # deferred: megatron-core loads with the model

    text_cfg = text_config(model, precision, on_gpu, False)
    if not initialize:
        text_cfg = dataclasses.replace(text_cfg, perform_initialization=False)
    return vision_config(model, precision, on_gpu, False), functools.partial(
        clip_chunk, text_cfg=text_cfg, eos=tokenizer.eos
    )


def _hf_architecture(model_config) -> str:
    from .hf_export import hf_architecture  # deferred: transformers and torch load only for an export

    return hf_architecture(model_config)


def _export_hf(model_config, full, hf_dir, dtype) -> str:
    from .hf_export import export_hf  # deferred with transformers

    return export_hf(model_config, full, hf_dir, dtype)


def _triton_entries(*args):
    from .triton_entries import triton_entries  # deferred: the export's modules load only for an export

    return triton_entries(*args)


VISION_FAMILY = VisionFamily(
    name="clip",
    display_name="CLIP",
    model_types=("megatron_clip",),
    conversion_schema="ClipConversionConfig",
    training_schema=_training_schema,
    model_schema=_model_schema,
    training_nemo="nemo_clip.nemo",
    towers=lambda model: [("vision.", model.vision), ("text.", model.text)],
    image_tower=lambda model: model.vision,
    default_mean=CLIP_MEAN,
    default_std=CLIP_STD,
    chunk_builder=_chunk_builder,
    reads_text=True,
    text_length=lambda model: model.text.encoder_seq_length,
    hf_architecture=_hf_architecture,
    export_hf=_export_hf,
    output_width=lambda model: model.output_dim,
    triton_entries=_triton_entries,
)
