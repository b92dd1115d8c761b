"""The vision families' part of the conversion job (jobs/vision/convert.py is the program, jobs/core/conversion.py
the flow every family shares): a ConversionFamily built from a family's record (vision/family.py): its schemas, its
model built for inference, the shard rules (saved_models.vision_shard_layout), the archive with its
vision_saved_model entry, and the Hugging Face export where the family has one (CLIP's: clip/hf_export.py).

    family = vision_family("clip")      # a ConversionFamily
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from ...contract.schemas.common_training import precision_name
from ..common.config import JobConfigError
from ..core import nemo_archive
from ..core.conversion import ConversionFamily, HFExportError
from ..core.shards import merge_shards
from ..multimodal.caption_tokenizer import load_clip_tokenizer
from .family import VisionFamily, family_record
from .saved_models import (
    SAVED_KEY,
    build_vision_model,
    inference_section,
    saved_config,
    start_vision_parallel,
    vision_shard_layout,
)


def _check_layout(family: VisionFamily, section, tp: int, pp: int) -> None:
    for prefix, tower in family.towers(section):
        for name in ("num_attention_heads", "ffn_hidden_size"):
            if getattr(tower, name) % tp:
                raise JobConfigError(
                    f"model.tensor_model_parallel_size: TP({tp}) must divide {prefix}{name}"
                    f"({getattr(tower, name)}) of the trained model; pick a TP that divides it"
                )


def _inference_section(family: VisionFamily, section, tp: int, pp: int):
    return dataclasses.replace(inference_section(section), tensor_model_parallel_size=tp)


def _build(family: VisionFamily, section, vocab_size: int, precision: str) -> torch.nn.Module:
    tokenizer = load_clip_tokenizer(section.tokenizer) if family.reads_text else None
    return build_vision_model(family.name, section, precision, vocab_size, tokenizer)


def _nemo_config(family: VisionFamily, model_config: Mapping[str, Any], training: Mapping[str, Any]) -> dict[str, Any]:
    names = family.class_names(model_config) if family.class_names else None
    if names is not None and len(names) != int(model_config.get("num_classes", len(names))):
        names = None  # the folder changed since training: better no names than wrong ones
    return saved_config(family.name, model_config, precision_name(training["trainer"]["precision"]), names)


def _checkpoint_prefix(training: Mapping[str, Any]) -> str:
    ema = (training.get("exp_manager") or {}).get("ema") or {}
    return "ema." if ema.get("enable") else ""


def _no_text(checkpoint) -> int:
    return 0


def _hf_architecture(family: VisionFamily, model_config: Mapping[str, Any]) -> str:
    if family.hf_architecture is None:
        raise HFExportError(f"the {family.display_name} model has no Hugging Face counterpart here")
    return family.hf_architecture(model_config)


def _write_hf(family: VisionFamily, cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    dtype = getattr(torch, cfg.hf.dtype) if cfg.hf.dtype else None
    clean = {key: value for key, value in model_config.items() if key != SAVED_KEY}
    return family.export_hf(clean, full, cfg.hf_dir, dtype)


def vision_family(name: str) -> ConversionFamily:
    family = family_record(name)
    bind = lambda function: lambda *args: function(family, *args)  # noqa: E731  (the record as first argument)
    return ConversionFamily(
        name=family.display_name,
        program="nemo_launcher.jobs.vision.convert",
        training_schema=family.training_schema(),
        model_schema=family.model_schema(),
        start_parallel=lambda tp, pp, seed: start_vision_parallel(tp, seed),
        inference_section=bind(_inference_section),
        check_layout=bind(_check_layout),
        build_inference_model=bind(_build),
        shard_layout=vision_shard_layout,
        merge_shards=merge_shards,
        hf_architecture=bind(_hf_architecture),
        write_hf=bind(_write_hf),
        nemo_archive=nemo_archive,
        vocab_size=None if family.reads_text else _no_text,
        checkpoint_prefix=_checkpoint_prefix,
        nemo_config=bind(_nemo_config),
    )
