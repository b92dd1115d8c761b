"""T5's part of the conversion job (convert.py is the program, jobs/core/conversion.py the flow every family
shares): its schemas, its inference model (PP 1), its shard rules (shards.py) and its
Hugging Face export (T5ForConditionalGeneration, MT5ForConditionalGeneration)."""

from collections.abc import Mapping
from typing import Any

import torch

from ...contract.schemas.t5_training import T5ModelSection, T5TrainingConfig
from ..common.config import JobConfigError
from ..core import nemo_archive
from ..core.conversion import ConversionFamily
from ..core.shards import merge_shards
from . import hf_export
from .shards import t5_shard_layout
from .standalone import build_inference_model, inference_section, start_t5_model_parallel


def _check_layout(section: T5ModelSection, tp: int, pp: int) -> None:
    # Attention and the relative-position bias are split by head, the MLP by its hidden units.
    if section.num_attention_heads % tp or section.ffn_hidden_size % tp:
        raise JobConfigError(
            f"model.tensor_model_parallel_size: TP({tp}) must divide num_attention_heads"
            f"({section.num_attention_heads}) and ffn_hidden_size({section.ffn_hidden_size})"
        )


def _write_hf(cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    from ..common.tokenizer import load_tokenizer

    spec = model_config["tokenizer"]
    tokenizer = load_tokenizer(
        **{key: spec.get(key) for key in ("library", "type", "model", "vocab_file", "merge_file")},
        num_sentinel_tokens=int(spec.get("num_sentinel_tokens", 100)),
    )
    dtype = getattr(torch, cfg.hf.dtype) if cfg.hf.dtype else None
    architecture = hf_export.export_hf(model_config, full, cfg.hf_dir, tokenizer, dtype=dtype)
    hf_export.write_hf_tokenizer(spec, tokenizer, cfg.hf_dir, max_length=int(model_config["encoder_seq_length"]))
    return architecture


T5 = ConversionFamily(
    name="T5",
    program="nemo_launcher.jobs.t5.convert",
    training_schema=T5TrainingConfig,
    model_schema=T5ModelSection,
    start_parallel=start_t5_model_parallel,
    inference_section=inference_section,
    check_layout=_check_layout,
    build_inference_model=build_inference_model,
    shard_layout=t5_shard_layout,
    merge_shards=merge_shards,
    hf_architecture=hf_export.hf_architecture,
    write_hf=_write_hf,
    nemo_archive=nemo_archive,
)
