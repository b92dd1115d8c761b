"""T5's part of the conversion job (convert.py is the program, jobs/core/conversion.py the flow every family
shares): its schemas, its inference model (PP 1), its shard rules (shards.py) and its
Hugging Face export (T5ForConditionalGeneration, MT5ForConditionalGeneration)."""

from collections.abc import Mapping
from typing import Any

import torch

from ...contract.schemas.t5_training import T5ModelSection, T5TrainingConfig
from ..core import nemo_archive
from ..core.conversion import ConversionFamily, check_model_split, config_tokenizer, hf_dtype
from ..core.shards import merge_shards
from . import hf_export
from .shards import t5_shard_layout
from .standalone import build_inference_model, inference_section, start_t5_model_parallel


def _check_layout(section: T5ModelSection, tp: int, pp: int) -> None:
    # Attention and the relative-position bias are split by head, the MLP by its hidden units.
    check_model_split(
        tp, {"num_attention_heads": section.num_attention_heads, "ffn_hidden_size": section.ffn_hidden_size}
    )


def _write_hf(cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    spec = model_config["tokenizer"]
    tokenizer = config_tokenizer(spec, num_sentinel_tokens=int(spec.get("num_sentinel_tokens", 100)))
    architecture = hf_export.export_hf(model_config, full, cfg.hf_dir, tokenizer, dtype=hf_dtype(cfg))
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
