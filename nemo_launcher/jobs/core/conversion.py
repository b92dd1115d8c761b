"""Conversion of a training checkpoint for any family: the megatron-core distributed checkpoint -> one `.nemo` file
in the TP x PP layout asked for, and a Hugging Face checkpoint where the family has an exact counterpart.

    sys.exit(run_conversion(argv, "nemo_launcher.jobs.bert.convert", BertConversionConfig, load_family))

A family's converter.py describes itself as a `ConversionFamily` (its schemas, how to build its model for
inference, its shard rules and its Hugging Face mapping); everything else is here. One process per rank of the
target layout: each builds its part of the model and lets dist_checkpointing read its slice of the checkpoint,
whatever TP/PP it was trained with (that is the resharding); rank 0 packs the `.nemo` and writes the Hugging Face
folder.
"""

import dataclasses
import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..common.config import JobConfigError, bind
from ..common.errors import JobError

_EMBEDDING = "embedding.word_embeddings.weight"


class HFExportError(JobError, ValueError):
    """The model has no exact Hugging Face counterpart; the message says which keys stand in the way."""


@dataclasses.dataclass(frozen=True)
class ConversionFamily:
    """What a family gives the conversion: names, schemas and functions of its own package."""

    name: str  # in messages: "GPT", "BERT"
    program: str  # the conversion program's module; also its logger's name
    training_schema: type  # the training config's schema: the hparams_file is bound to it
    model_schema: type  # its `model:` section
    start_parallel: Callable[[int, int, int], Any]  # (tp, pp, seed) -> Placement
    inference_section: Callable[[Any, int, int], Any]  # (bound model section, tp, pp) -> section to build
    check_layout: Callable[[Any, int, int], None]  # JobConfigError when the model does not split over TP x PP
    build_inference_model: Callable[[Any, int, str], torch.nn.Module]  # (section, padded vocab, precision)
    shard_layout: Callable[[Mapping[str, Any], int, int], Any]  # (model config, tp, pp) -> layout
    merge_shards: Callable[[Mapping[tuple[int, int], Mapping[str, Any]], Any], dict[str, torch.Tensor]]
    hf_architecture: Callable[[Mapping[str, Any]], str]  # the class name, or HFExportError with the reasons
    write_hf: Callable[[Any, Mapping[str, Any], Mapping[str, torch.Tensor]], str]  # (cfg, model config, full state)
    # The .nemo format (save_nemo, write_nemo, load_weights): every family's is core/nemo_archive.py so far; passed in
    # because the core imports no family package.
    nemo_archive: Any
    # checkpoint -> padded vocabulary rows; by default those of its word embedding table (0 for a model without text).
    vocab_size: Callable[[Path], int] | None = None
    # the training config (a dict) -> prefix of the checkpoint entries to convert: "" for the weights, or the key of
    # an average saved beside them (CLIP's EMA, "ema.").
    checkpoint_prefix: Callable[[Mapping[str, Any]], str] | None = None
    # (model config, training config) -> the model_config.yaml to store; by default the model config itself.
    nemo_config: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None


def check_model_split(tp: int, split_by_tp: Mapping[str, int], pp: int = 1, num_layers: int | None = None) -> None:
    """A family's check_layout: JobConfigError unless TP divides every size in split_by_tp (name -> size: the
    heads, query groups, hidden units the family splits over tensor-parallel ranks) and PP divides num_layers (when
    the family splits layers over pipeline stages)."""
    if any(size % tp for size in split_by_tp.values()):
        named = [f"{name}({size})" for name, size in split_by_tp.items()]
        raise JobConfigError(
            f"model.tensor_model_parallel_size: TP({tp}) must divide {', '.join(named[:-1])} and {named[-1]}"
        )
    if num_layers is not None and num_layers % pp:
        raise JobConfigError(f"model.pipeline_model_parallel_size: PP({pp}) must divide num_layers({num_layers})")


def config_tokenizer(spec: Mapping[str, Any], **options):
    """The tokenizer a model config's `tokenizer` mapping names; options: load_tokenizer's (T5's sentinels)."""
    from ..common.tokenizer import load_tokenizer

    return load_tokenizer(
        **{key: spec.get(key) for key in ("library", "type", "model", "vocab_file", "merge_file")}, **options
    )


def hf_dtype(cfg) -> torch.dtype | None:
    """The dtype hf.dtype asks the Hugging Face weights in; None keeps the checkpoint's."""
    return getattr(torch, cfg.hf.dtype) if cfg.hf.dtype else None


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What rank 0 wrote, for the job's summary."""

    checkpoint: Path  # the training checkpoint read
    nemo_path: Path
    hf_dir: Path | None  # None when no Hugging Face checkpoint was written
    hf_note: str  # the architecture written, or why nothing was


def run_conversion(argv, program: str, config_schema, load_family: Callable[[], ConversionFamily]) -> int:
    """The conversion program: bind the config, hold the run directory, convert, summarise. Exit codes as in
    the README (0, 2 configuration, 74 storage, 75 directory in use). load_family is called once the config is
    bound, so a configuration error costs no megatron import."""
    import time

    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        prog = f"python3 -m {program}"
        with claimed_run(argv, prog, config_schema.from_dict, lambda cfg: cfg.writes()[0]) as (cfg, placement):
            result = convert(cfg, load_family())
            conversion_summary(result, time.monotonic() - started).show(placement.rank)
        return 0
    except (JobConfigError, JobFault) as error:
        return print_error(error)


def convert(cfg, family: ConversionFamily) -> ConversionResult:
    """cfg: the bound conversion config (run, model, hf sections as in common_conversion)."""
    from megatron.core import parallel_state

    log = logging.getLogger(family.program)
    checkpoint = find_checkpoint(cfg.model.checkpoint_folder, cfg.model.checkpoint_name)
    training = training_model_section(cfg, family.training_schema)
    model_config, precision = training["model"], training["precision"]
    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    placement = family.start_parallel(tp, pp, int(model_config.get("seed", 1234)))
    rank_zero = placement.rank == 0
    section = family.inference_section(bind(family.model_schema, model_config, "model"), tp, pp)
    family.check_layout(section, tp, pp)
    vocab = family.vocab_size(checkpoint) if family.vocab_size else checkpoint_vocab_size(checkpoint, family.name)
    if vocab % tp:
        raise JobConfigError(
            f"model.tensor_model_parallel_size: the checkpoint's padded vocabulary ({vocab} rows) does not "
            f"split over TP({tp}); pick a TP that divides it"
        )
    if rank_zero:
        log.info(
            "converting %s (%s, %s rows of vocabulary) to TP=%d PP=%d: %s",
            checkpoint,
            precision,
            vocab,
            tp,
            pp,
            cfg.nemo_path,
        )
    model = family.build_inference_model(section, vocab, precision)
    prefix = family.checkpoint_prefix(training["training"]) if family.checkpoint_prefix else ""
    load_checkpoint_weights(model, checkpoint, family.nemo_archive.load_weights, prefix)
    if family.nemo_config:
        model_config = family.nemo_config(model_config, training["training"])
    # On the host: the .nemo is read on machines without this GPU, and safetensors writes from host memory.
    state = {key: value.cpu() for key, value in model.state_dict().items() if not key.endswith("._extra_state")}

    if tp * pp == 1:
        full = state
        if rank_zero:
            family.nemo_archive.save_nemo(cfg.nemo_path, model_config, state)
    else:
        full = _write_sharded(cfg, family, model_config, state, parallel_state, rank_zero)
    hf_dir, hf_note = None, "hf.mode: off"
    if rank_zero:
        log.info("wrote %s", cfg.nemo_path)
        if cfg.hf.mode != "off":
            hf_dir, hf_note = _export_hf(cfg, family, model_config, full, log)
    _barrier()
    return ConversionResult(checkpoint, cfg.nemo_path, hf_dir, hf_note)


def find_checkpoint(folder: str, name: str) -> Path:
    """The checkpoint to convert: `folder` itself when it is a complete step folder, else by `name` in it."""
    from .checkpoints import MARKER, CheckpointFolder

    root = Path(folder)
    if (root / MARKER).is_file():
        return _intact(root, "model.checkpoint_folder", CheckpointFolder(root.parent))
    checkpoints = CheckpointFolder(root)
    if name == "latest":
        newest = checkpoints.newest_complete()
        if newest is None:
            raise JobConfigError(
                f"model.checkpoint_folder: {root} holds no complete checkpoint (a step-<N> folder "
                f"with a {MARKER} marker); did the training run save one?"
            )
        return _intact(newest, "model.checkpoint_name", checkpoints)
    chosen = root / name
    if not (chosen / MARKER).is_file():
        have = ", ".join(f"step-{s}" for s in checkpoints.steps()) or "none"
        raise JobConfigError(f"model.checkpoint_name: {chosen} is not a complete checkpoint; complete ones: {have}")
    return _intact(chosen, "model.checkpoint_name", checkpoints)


def _intact(checkpoint: Path, key: str, checkpoints) -> Path:
    """`checkpoint` when its files match what its save recorded, else exit 74 naming them. No fallback, unlike a
    resume: a conversion of an older step than the one asked for would pass for the trained model. Every process
    checks every file: it runs before the process group exists, and a conversion reads the whole checkpoint anyway."""
    from .resume import DamagedCheckpoints

    problems = checkpoints.damage(checkpoint)
    if problems:
        others = ", ".join(f"step-{s}" for s in checkpoints.steps() if checkpoints.path(s) != checkpoint) or "none"
        raise DamagedCheckpoints(
            f"{key}: {checkpoint} differs from what its save recorded "
            f"({'; '.join(str(checkpoint / problem) for problem in problems)}); restore those files "
            f"from a copy, or convert another complete checkpoint (model.checkpoint_name; complete ones: {others})"
        )
    return checkpoint


def training_model_section(cfg, training_schema) -> dict[str, Any]:
    """The training run's `model:` section (with the conversion's tokenizer file overrides) and its precision name."""
    from ..common.config import load_resolved_config

    try:
        training = load_resolved_config(Path(cfg.model.hparams_file))
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {error}") from None
    try:
        parsed = training_schema.from_dict(training)
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {cfg.model.hparams_file}: {error}") from None
    model = dict(training["model"])
    if "tokenizer" in model:  # a model that reads no text (ViT) has none
        tokenizer = dict(model["tokenizer"])
        for key, value in (
            ("vocab_file", cfg.model.vocab_file),
            ("merge_file", cfg.model.merge_file),
            ("model", cfg.model.tokenizer_model),
        ):
            if value is not None:
                tokenizer[key] = value
        model["tokenizer"] = tokenizer
    return {"model": model, "precision": parsed.trainer.precision_name(), "training": training}


def checkpoint_vocab_size(checkpoint: Path, family: str) -> int:
    """Rows of the trained (padded) embedding table, read from the checkpoint's metadata.

    The trainer pads the vocabulary to a multiple of make_vocab_size_divisible_by x its own TP, so the size
    cannot be recomputed from the tokenizer once TP changes; dist_checkpointing needs it exact.
    """
    from megatron.core import dist_checkpointing

    metadata = dist_checkpointing.load_tensors_metadata(str(checkpoint))
    if _EMBEDDING not in metadata:
        raise JobConfigError(
            f"model.checkpoint_folder: {checkpoint} holds no {_EMBEDDING}; is it a {family} checkpoint?"
        )
    return int(metadata[_EMBEDDING].global_shape[0])


def load_checkpoint_weights(model: torch.nn.Module, checkpoint: Path, load_weights, prefix: str = "") -> None:
    """This rank's slice of every weight, whatever layout the checkpoint was written with.

    Only the model's tensors are asked for (the optimizer state and Lightning's bookkeeping stay on disk).
    `_extra_state` entries are left out: the local spec keeps nothing in them, and their sharding metadata
    depends on the layout the checkpoint was written with. load_weights(model, state_dict, source) loads strictly.
    prefix: read the tensors saved under `<prefix><name>` (an average kept beside the weights) instead.
    """
    from megatron.core import dist_checkpointing

    sharded = {
        key: value
        for key, value in model.sharded_state_dict(prefix=prefix).items()
        if not key.endswith("._extra_state")
    }
    loaded = dist_checkpointing.load(sharded, str(checkpoint))
    load_weights(model, {key[len(prefix) :]: loaded[key] for key in sharded}, str(checkpoint))


def _write_sharded(
    cfg,
    family: ConversionFamily,
    model_config: dict[str, Any],
    state: dict[str, torch.Tensor],
    parallel_state,
    rank_zero: bool,
) -> dict[str, torch.Tensor] | None:
    """Every model-parallel rank of data-parallel replica 0 saves its shard beside the target; rank 0 packs them
    and returns the merged full state dict (for the Hugging Face export)."""
    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    staging = cfg.nemo_path.parent / f".{cfg.nemo_path.name}.shards"
    if rank_zero:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier()
    if parallel_state.get_data_parallel_rank() == 0:
        tp_rank, pp_rank = (
            parallel_state.get_tensor_model_parallel_rank(),
            parallel_state.get_pipeline_model_parallel_rank(),
        )
        torch.save(state, staging / _shard_name(tp_rank, pp_rank))
    _barrier()
    if not rank_zero:
        return None
    try:
        files = {(t, p): staging / _shard_name(t, p) for t in range(tp) for p in range(pp)}
        family.nemo_archive.write_nemo(
            cfg.nemo_path, dict(model_config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp), files
        )
        if cfg.hf.mode == "off":
            return None
        shards = {rank: torch.load(path, map_location="cpu", weights_only=True) for rank, path in files.items()}
        return family.merge_shards(shards, family.shard_layout(model_config, tp, pp))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _shard_name(tp_rank: int, pp_rank: int) -> str:
    return f"tp{tp_rank}_pp{pp_rank}.pt"


def _export_hf(
    cfg,
    family: ConversionFamily,
    model_config: Mapping[str, Any],
    full: Mapping[str, torch.Tensor],
    log: logging.Logger,
) -> tuple[Path | None, str]:
    """(the folder written or None, the architecture or why there is none)."""
    try:
        family.hf_architecture(model_config)
    except HFExportError as error:
        if cfg.hf.mode == "required":
            raise JobConfigError(f"hf.mode: required, but {error}") from None
        log.warning("no Hugging Face export (hf.mode: auto): %s", error)
        return None, f"not written (hf.mode: auto): {error}"
    architecture = family.write_hf(cfg, model_config, full)
    log.info("wrote Hugging Face %s checkpoint to %s", architecture, cfg.hf_dir)
    return cfg.hf_dir, architecture


def save_hf_checkpoint(
    out_dir, tensors: Mapping[str, torch.Tensor], config: dict[str, Any], dtype: torch.dtype
) -> None:
    """model.safetensors and config.json in out_dir (created; files of the same names replaced)."""
    import json

    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # safetensors refuses views that share storage (the vocabulary cut, the qkv split): each gets its own copy.
    save_file(
        {name: t.detach().to(dtype).contiguous().clone() for name, t in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (out / "model.safetensors").chmod(0o644)  # safetensors creates it owner-only; the other files are 0644
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def conversion_summary(result: ConversionResult, seconds: float):
    from ..common.report import Summary, duration, size, size_of

    summary = Summary(f"conversion finished: {result.checkpoint}")
    summary.add(".nemo", f"{result.nemo_path} ({size(size_of(result.nemo_path))})")
    if result.hf_dir is not None:
        summary.add("Hugging Face", f"{result.hf_dir} ({result.hf_note}, {size(size_of(result.hf_dir))})")
    else:
        summary.add("Hugging Face", result.hf_note)
    return summary.add("time", duration(seconds))


def _barrier() -> None:
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()
