"""The work of the conversion job (see convert.py for the program and its config): read the distributed
checkpoint into the target TP x PP layout, write the .nemo, export to Hugging Face where possible."""
import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from ..common.config import JobConfigError, bind
from ...contract.schemas.gpt_training import ModelSection
from .convert import ConversionConfig, find_checkpoint, training_model_section
from .nemo_archive import load_weights, save_nemo, write_nemo
from .standalone import build_inference_model, inference_section, start_model_parallel

log = logging.getLogger("nemo_launcher.jobs.gpt.convert")

_EMBEDDING = "embedding.word_embeddings.weight"


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What rank 0 wrote, for the job's summary."""

    checkpoint: Path  # the training checkpoint read
    nemo_path: Path
    hf_dir: Optional[Path]  # None when no Hugging Face checkpoint was written
    hf_note: str  # the architecture written, or why nothing was


def convert(cfg: ConversionConfig) -> ConversionResult:
    from megatron.core import parallel_state

    checkpoint = find_checkpoint(cfg.model.checkpoint_folder, cfg.model.checkpoint_name)
    training = training_model_section(cfg)
    model_config, precision = training["model"], training["precision"]
    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    placement = start_model_parallel(tp, pp, seed=int(model_config.get("seed", 1234)))
    rank_zero = placement.rank == 0
    section = inference_section(bind(ModelSection, model_config, "model"), tp, pp)
    _check_layout(section, tp, pp)
    vocab = checkpoint_vocab_size(checkpoint)
    if vocab % tp:
        raise JobConfigError(f"model.tensor_model_parallel_size: the checkpoint's padded vocabulary ({vocab} rows) does not "
                             f"split over TP({tp}); pick a TP that divides it")
    if rank_zero:
        log.info("converting %s (%s, %s rows of vocabulary) to TP=%d PP=%d: %s", checkpoint, precision, vocab, tp, pp, cfg.nemo_path)
    model = build_inference_model(section, vocab, precision)
    load_checkpoint_weights(model, checkpoint)
    # On the host: the .nemo is read on machines without this GPU, and safetensors writes from host memory.
    state = {key: value.cpu() for key, value in model.state_dict().items() if not key.endswith("._extra_state")}

    if tp * pp == 1:
        full = state
        if rank_zero:
            save_nemo(cfg.nemo_path, model_config, state)
    else:
        full = _write_sharded(cfg, model_config, state, parallel_state, rank_zero)
    hf_dir, hf_note = None, "hf.mode: off"
    if rank_zero:
        log.info("wrote %s", cfg.nemo_path)
        if cfg.hf.mode != "off":
            hf_dir, hf_note = _export_hf(cfg, model_config, full)
    _barrier()
    return ConversionResult(checkpoint, cfg.nemo_path, hf_dir, hf_note)


def checkpoint_vocab_size(checkpoint: Path) -> int:
    """Rows of the trained (padded) embedding table, read from the checkpoint's metadata.

    The trainer pads the vocabulary to a multiple of make_vocab_size_divisible_by x its own TP, so the
    size cannot be recomputed from the tokenizer once TP changes; dist_checkpointing needs it exact.
    """
    from megatron.core import dist_checkpointing

    metadata = dist_checkpointing.load_tensors_metadata(str(checkpoint))
    if _EMBEDDING not in metadata:
        raise JobConfigError(f"model.checkpoint_folder: {checkpoint} holds no {_EMBEDDING}; is it a GPT checkpoint?")
    return int(metadata[_EMBEDDING].global_shape[0])


def load_checkpoint_weights(model: torch.nn.Module, checkpoint: Path) -> None:
    """This rank's slice of every weight, whatever layout the checkpoint was written with.

    Only the model's tensors are asked for (the optimizer state and Lightning's bookkeeping stay on disk).
    `_extra_state` entries are left out: the local spec keeps nothing in them, and their sharding
    metadata depends on the layout the checkpoint was written with.
    """
    from megatron.core import dist_checkpointing

    sharded = {key: value for key, value in model.sharded_state_dict().items() if not key.endswith("._extra_state")}
    loaded = dist_checkpointing.load(sharded, str(checkpoint))
    load_weights(model, {key: loaded[key] for key in sharded}, str(checkpoint))


def _check_layout(section: ModelSection, tp: int, pp: int) -> None:
    heads, groups = section.num_attention_heads, section.num_query_groups or section.num_attention_heads
    if heads % tp or groups % tp or section.ffn_hidden_size % tp:
        raise JobConfigError(f"model.tensor_model_parallel_size: TP({tp}) must divide num_attention_heads({heads}), "
                             f"num_query_groups({groups}) and ffn_hidden_size({section.ffn_hidden_size})")
    if section.num_layers % pp:
        raise JobConfigError(f"model.pipeline_model_parallel_size: PP({pp}) must divide num_layers({section.num_layers})")


def _write_sharded(cfg: ConversionConfig, model_config: Dict[str, Any], state: Dict[str, torch.Tensor],
                   parallel_state, rank_zero: bool) -> Optional[Dict[str, torch.Tensor]]:
    """Every model-parallel rank of data-parallel replica 0 saves its shard beside the target; rank 0 packs
    them and returns the merged full state dict (for the Hugging Face export)."""
    from .shards import ShardLayout, merge_shards

    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    staging = cfg.nemo_path.parent / f".{cfg.nemo_path.name}.shards"
    if rank_zero:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier()
    if parallel_state.get_data_parallel_rank() == 0:
        tp_rank, pp_rank = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
        torch.save(state, staging / _shard_name(tp_rank, pp_rank))
    _barrier()
    if not rank_zero:
        return None
    try:
        files = {(t, p): staging / _shard_name(t, p) for t in range(tp) for p in range(pp)}
        write_nemo(cfg.nemo_path, dict(model_config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp), files)
        if cfg.hf.mode == "off":
            return None
        shards = {rank: torch.load(path, map_location="cpu", weights_only=True) for rank, path in files.items()}
        return merge_shards(shards, ShardLayout.of(model_config, tp, pp))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _shard_name(tp_rank: int, pp_rank: int) -> str:
    return f"tp{tp_rank}_pp{pp_rank}.pt"


def _export_hf(cfg: ConversionConfig, model_config: Mapping[str, Any],
               full: Mapping[str, torch.Tensor]) -> Tuple[Optional[Path], str]:
    """(the folder written or None, the architecture or why there is none)."""
    from ..common.tokenizer import GPT2_EOD, load_tokenizer
    from .hf_export import HFExportError, export_hf, hf_architecture, write_hf_tokenizer

    try:
        hf_architecture(model_config)
    except HFExportError as error:
        if cfg.hf.mode == "required":
            raise JobConfigError(f"hf.mode: required, but {error}") from None
        log.warning("no Hugging Face export (hf.mode: auto): %s", error)
        return None, f"not written (hf.mode: auto): {error}"
    spec = model_config["tokenizer"]
    tokenizer = load_tokenizer(spec["library"], spec.get("type"), spec.get("model"), spec.get("vocab_file"), spec.get("merge_file"))
    dtype = getattr(torch, cfg.hf.dtype) if cfg.hf.dtype else None
    architecture = export_hf(model_config, full, cfg.hf_dir, vocab_size=tokenizer.vocab_size, eod=tokenizer.eod, dtype=dtype)
    eod_token = GPT2_EOD if spec["library"] == "megatron" else _token_of(spec, tokenizer.eod)
    write_hf_tokenizer(spec, cfg.hf_dir, eod_token, max_length=int(model_config["encoder_seq_length"]))
    log.info("wrote Hugging Face %s checkpoint to %s", architecture, cfg.hf_dir)
    return cfg.hf_dir, architecture


def _token_of(spec: Mapping[str, Any], token_id: int) -> Optional[str]:
    if spec["library"] != "huggingface":
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(spec["model"]).id_to_token(token_id)


def _barrier() -> None:
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()
