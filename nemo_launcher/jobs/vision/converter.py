"""The vision families' part of the conversion job (jobs/vision/convert.py is the program, jobs/core/conversion.py
the flow every family shares): their schemas, their models built for inference, their shard
rules (saved_models.vision_shard_layout), the archive with its vision_saved_model entry, and for CLIP the Hugging
Face export (clip/hf_export.py says when transformers' CLIPModel computes the same embeddings).

    family = vision_family("clip")      # a ConversionFamily
"""
import dataclasses
import os
from typing import Any, Dict, Mapping, Optional

import torch

from ..common.config import JobConfigError
from ..core.conversion import ConversionFamily
from ..core.shards import merge_shards
from ..core import nemo_archive
from .saved_models import (SAVED_KEY, build_vision_model, inference_section, saved_config, start_vision_parallel,
                           vision_shard_layout)


def _towers(family: str, section):
    return [("", section)] if family == "vit" else [("vision.", section.vision), ("text.", section.text)]


def _check_layout(family: str, section, tp: int, pp: int) -> None:
    for prefix, tower in _towers(family, section):
        for name in ("num_attention_heads", "ffn_hidden_size"):
            if getattr(tower, name) % tp:
                raise JobConfigError(f"model.tensor_model_parallel_size: TP({tp}) must divide {prefix}{name}"
                                     f"({getattr(tower, name)}) of the trained model; pick a TP that divides it")


def _inference_section(family: str, section, tp: int, pp: int):
    return dataclasses.replace(inference_section(section, family), tensor_model_parallel_size=tp)


def _build(family: str, section, vocab_size: int, precision: str) -> torch.nn.Module:
    tokenizer = None
    if family == "clip":
        from ..multimodal.caption_tokenizer import load_clip_tokenizer

        tokenizer = load_clip_tokenizer(section.tokenizer)
    return build_vision_model(family, section, precision, vocab_size, tokenizer)


def class_names(model_config: Mapping[str, Any]) -> Optional[list]:
    """The class folder names a ViT was trained on, when its training folder is still readable from here."""
    paths = (model_config.get("data") or {}).get("data_path") or []
    if not paths or not os.path.isdir(paths[0]):
        return None
    return sorted(name for name in os.listdir(paths[0]) if os.path.isdir(os.path.join(paths[0], name)))


def _nemo_config(family: str, model_config: Mapping[str, Any], training: Mapping[str, Any]) -> Dict[str, Any]:
    from ...contract.schemas.common_training import precision_name

    names = class_names(model_config) if family == "vit" else None
    if names is not None and len(names) != int(model_config.get("num_classes", len(names))):
        names = None  # the folder changed since training: better no names than wrong ones
    return saved_config(family, model_config, precision_name(training["trainer"]["precision"]), names)


def _checkpoint_prefix(training: Mapping[str, Any]) -> str:
    ema = (training.get("exp_manager") or {}).get("ema") or {}
    return "ema." if ema.get("enable") else ""


def _no_text(checkpoint) -> int:
    return 0


def _hf_architecture(family: str, model_config: Mapping[str, Any]) -> str:
    from ..core.conversion import HFExportError

    if family == "vit":
        raise HFExportError("the ViT classifier has no Hugging Face counterpart here")
    from ..clip.hf_export import hf_architecture

    return hf_architecture(model_config)


def _write_hf(cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    from ..clip.hf_export import export_hf

    dtype = getattr(torch, cfg.hf.dtype) if cfg.hf.dtype else None
    clean = {key: value for key, value in model_config.items() if key != SAVED_KEY}
    return export_hf(clean, full, cfg.hf_dir, dtype)


def vision_family(family: str) -> ConversionFamily:
    from ...contract.schemas.clip_training import ClipModelSection, ClipTrainingConfig
    from ...contract.schemas.vit_training import VitModelSection, VitTrainingConfig

    schemas = {"vit": (VitTrainingConfig, VitModelSection), "clip": (ClipTrainingConfig, ClipModelSection)}
    training_schema, model_schema = schemas[family]
    bind = lambda function: lambda *args: function(family, *args)  # noqa: E731  (the family as first argument)
    return ConversionFamily(
        name={"vit": "ViT", "clip": "CLIP"}[family],
        program="nemo_launcher.jobs.vision.convert",
        training_schema=training_schema,
        model_schema=model_schema,
        start_parallel=lambda tp, pp, seed: start_vision_parallel(tp, seed),
        inference_section=bind(_inference_section),
        check_layout=bind(_check_layout),
        build_inference_model=bind(_build),
        shard_layout=vision_shard_layout,
        merge_shards=merge_shards,
        hf_architecture=bind(_hf_architecture),
        write_hf=_write_hf,
        nemo_archive=nemo_archive,
        vocab_size=_no_text if family == "vit" else None,
        checkpoint_prefix=_checkpoint_prefix,
        nemo_config=bind(_nemo_config),
    )
