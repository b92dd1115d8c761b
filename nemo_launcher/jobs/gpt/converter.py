"""GPT's part of the conversion job (convert.py is the program, jobs/core/conversion.py the flow every family
shares): its schemas, its inference model, its shard rules and its Hugging Face export (GPT-2 or Llama)."""

from collections.abc import Mapping
from typing import Any

import torch

from ...contract.schemas.gpt_training import ModelSection, TrainingConfig
from ..core import nemo_archive
from ..core.conversion import ConversionFamily, check_model_split, config_tokenizer, hf_dtype
from ..core.shards import merge_shards
from ..core.standalone import start_model_parallel
from . import hf_export
from .inference import build_inference_model, inference_section
from .shards import gpt_shard_layout


def _check_layout(section: ModelSection, tp: int, pp: int) -> None:
    split = {
        "num_attention_heads": section.num_attention_heads,
        "num_query_groups": section.num_query_groups or section.num_attention_heads,
        "ffn_hidden_size": section.ffn_hidden_size,
    }
    check_model_split(tp, split, pp, section.num_layers)


def _write_hf(cfg, model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor]) -> str:
    return write_hf_folder(model_config, full, cfg.hf_dir, hf_dtype(cfg))


def write_hf_folder(
    model_config: Mapping[str, Any], full: Mapping[str, torch.Tensor], out_dir, dtype: torch.dtype | None
) -> str:
    """Weights, config.json and tokenizer files of the Hugging Face class that computes the model; returns its name.
    full: the TP=1 PP=1 state dict; dtype: of the written weights, None = as stored."""
    from ..common.tokenizer import GPT2_EOD

    spec = model_config["tokenizer"]
    tokenizer = config_tokenizer(spec)
    architecture = hf_export.export_hf(
        model_config, full, out_dir, vocab_size=tokenizer.vocab_size, eod=tokenizer.eod, dtype=dtype
    )
    eod_token = GPT2_EOD if spec["library"] == "megatron" else _token_of(spec, tokenizer.eod)
    hf_export.write_hf_tokenizer(spec, out_dir, eod_token, max_length=int(model_config["encoder_seq_length"]))
    return architecture


def _token_of(spec: Mapping[str, Any], token_id: int) -> str | None:
    if spec["library"] != "huggingface":
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(spec["model"]).id_to_token(token_id)


GPT = ConversionFamily(
    name="GPT",
    program="nemo_launcher.jobs.gpt.convert",
    training_schema=TrainingConfig,
    model_schema=ModelSection,
    start_parallel=start_model_parallel,
    inference_section=inference_section,
    check_layout=_check_layout,
    build_inference_model=build_inference_model,
    shard_layout=gpt_shard_layout,
    merge_shards=merge_shards,
    hf_architecture=hf_export.hf_architecture,
    write_hf=_write_hf,
    nemo_archive=nemo_archive,
)
