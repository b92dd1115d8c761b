"""BERT's part of the conversion job (convert.py is the program, jobs/core/conversion.py the flow every family
shares): its schemas, its inference model, its shard rules and its Hugging Face export (MegatronBert, where the
model has that form; hf_export.py says when)."""

from collections.abc import Mapping
from typing import Any

import torch

from ...contract.schemas.bert_training import BertModelSection, BertTrainingConfig
from ..core import nemo_archive
from ..core.conversion import ConversionFamily, check_model_split, config_tokenizer, hf_dtype
from ..core.shards import merge_shards
from . import hf_export
from .shards import bert_shard_layout
from .standalone import build_inference_model, inference_section, start_bert_model_parallel


def _check_layout(section: BertModelSection, tp: int, pp: int) -> None:
    split = {"num_attention_heads": section.num_attention_heads, "ffn_hidden_size": section.ffn_hidden_size}
    check_model_split(tp, split, pp, section.num_layers)


def _write_hf(cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    from ..common.tokenizer import WORDPIECE_TYPES

    spec = model_config["tokenizer"]
    tokenizer = config_tokenizer(spec)
    architecture = hf_export.export_hf(
        model_config, full, cfg.hf_dir, vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad, dtype=hf_dtype(cfg)
    )
    hf_export.write_hf_tokenizer(
        tokenizer,
        cfg.hf_dir,
        lower_case=WORDPIECE_TYPES[spec["type"]],
        max_length=int(model_config["encoder_seq_length"]),
    )
    return architecture


BERT = ConversionFamily(
    name="BERT",
    program="nemo_launcher.jobs.bert.convert",
    training_schema=BertTrainingConfig,
    model_schema=BertModelSection,
    start_parallel=start_bert_model_parallel,
    inference_section=inference_section,
    check_layout=_check_layout,
    build_inference_model=build_inference_model,
    shard_layout=bert_shard_layout,
    merge_shards=merge_shards,
    hf_architecture=hf_export.hf_architecture,
    write_hf=_write_hf,
    nemo_archive=nemo_archive,
)
