"""Import: a Hugging Face model folder (Llama 2/3, Mistral, Qwen2, Mixtral) -> our GPT `.nemo` and a megatron-core
distributed checkpoint of the same weights, both at the TP x PP the config asks for.

    python3 -u -m nemo_launcher.jobs.gpt.hf_import --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.hf_import --config ...     (TP x PP = 2)

One process per rank of the target layout. Each reads the tensors of its pipeline stage from the folder's
memory-mapped safetensors, maps them to our parameter names (hf_weights.py), takes its TP slice (the rules every GPT
`.nemo` is split by) and loads it strictly into its part of the GPTModel the imported `model:` section builds: a
tensor left over or missing stops the job. The results go to <run.results_dir>/results/: <run.nemo_file_name>, and
checkpoints/step-0 (megatron-core's sharded format, the model's weights only, with the COMPLETE marker and the file
record of a training run's step folders). The folder's config.json is checked by the rules the
launcher applied (contract/hf_architectures.py). Exit codes: 0 done, 2 configuration error, 74 a write failed for
lack of space or permission, 75 run.results_dir in use.

Only the standard library is imported at module level: megatron's checkpoint code may spawn a helper process that
re-imports this module.
"""

import dataclasses
import sys
from pathlib import Path

PROGRAM = "nemo_launcher.jobs.gpt.hf_import"


@dataclasses.dataclass(frozen=True)
class ImportResult:
    source: Path  # the Hugging Face folder
    architecture: str
    nemo_path: Path
    checkpoint: Path
    layout: str  # "TP=2 PP=1, bf16"


def import_folder(cfg) -> ImportResult:
    """Every rank: its slice into its model part; rank 0 packs the .nemo and marks the checkpoint complete."""
    # The save path's modules, imported before start_model_parallel's CPU shim, which patches only loaded modules.
    import megatron.core.dist_checkpointing.strategies.filesystem_async  # noqa: F401
    import megatron.core.dist_checkpointing.strategies.state_dict_saver  # noqa: F401
    import megatron.core.dist_checkpointing.strategies.torch  # noqa: F401
    import torch
    from megatron.core import parallel_state

    from ...contract.schemas.gpt_training import ModelSection
    from ..common.config import bind
    from ..core.nemo_archive import load_weights
    from ..core.shards import split_state_dict
    from ..core.standalone import PRECISIONS, start_model_parallel
    from ..core.transformer import padded_vocab_size
    from .hf_weights import SafetensorsFolder, megatron_state_dict
    from .inference import build_inference_model, inference_section
    from .shards import gpt_shard_layout

    folder = cfg.folder()
    model_config = cfg.model_config()
    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    precision = cfg.model.precision or folder.dtype()
    start_model_parallel(tp, pp)
    section = bind(ModelSection, model_config, "model")
    padded = padded_vocab_size(section.vocab_size, section.make_vocab_size_divisible_by, tp)
    pp_rank, per_stage = parallel_state.get_pipeline_model_parallel_rank(), section.num_layers // pp
    stage = range(pp_rank * per_stage, (pp_rank + 1) * per_stage)
    mapped = megatron_state_dict(SafetensorsFolder(folder.path, folder.key), model_config, padded, layers=stage)
    full = {name: tensor.to(PRECISIONS[precision]) for name, tensor in mapped.items()}
    del mapped
    layout = gpt_shard_layout(model_config, tp, pp)
    shard = split_state_dict(full, layout, parallel_state.get_tensor_model_parallel_rank(), pp_rank)
    del full
    model = build_inference_model(inference_section(section, tp, pp), padded, precision)
    load_weights(model, shard, str(folder.path))
    rank_zero = torch.distributed.get_rank() == 0
    state = {key: value.cpu() for key, value in model.state_dict().items() if not key.endswith("._extra_state")}
    _write_nemo(cfg, model_config, state, rank_zero)
    _write_checkpoint(cfg, model, rank_zero)
    return ImportResult(
        folder.path, folder.architecture_name, cfg.nemo_path, cfg.checkpoint_dir, f"TP={tp} PP={pp}, {precision}"
    )


def _write_nemo(cfg, model_config: dict, state: dict, rank_zero: bool) -> None:
    """TP=1 PP=1: rank 0 saves the one state dict. Otherwise each rank of data-parallel replica 0 saves its shard
    beside the target and rank 0 packs them (the layout a GPT conversion writes)."""
    import torch
    from megatron.core import parallel_state

    from ..core import nemo_archive

    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    if tp * pp == 1:
        if rank_zero:
            nemo_archive.save_nemo(cfg.nemo_path, model_config, state)
        _barrier()
        return
    staging = cfg.nemo_path.parent / f".{cfg.nemo_path.name}.shards"
    if rank_zero:
        staging.mkdir(parents=True, exist_ok=True)
    _barrier()
    if parallel_state.get_data_parallel_rank() == 0:
        ranks = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
        torch.save(state, staging / f"tp{ranks[0]}_pp{ranks[1]}.pt")
    _barrier()
    if rank_zero:
        files = {(t, p): staging / f"tp{t}_pp{p}.pt" for t in range(tp) for p in range(pp)}
        try:
            nemo_archive.write_nemo(cfg.nemo_path, model_config, files)
        finally:
            for path in files.values():
                path.unlink(missing_ok=True)
            staging.rmdir()
    _barrier()


def _write_checkpoint(cfg, model, rank_zero: bool) -> None:
    """megatron-core's sharded checkpoint of the model's weights (no optimizer state), marked complete last."""
    from megatron.core import dist_checkpointing

    from ...contract.schemas.hf_conversion import CHECKPOINT_STEP
    from ..common.helper_processes import collect_write_results_here, stop_signals_held
    from ..core import checkpoint_manifest
    from ..core.checkpoints import FILES_KEY, CheckpointFolder

    checkpoints = CheckpointFolder(cfg.checkpoint_dir.parent)
    if rank_zero:
        checkpoints.prepare(CHECKPOINT_STEP)
    _barrier()
    sharded = {key: value for key, value in model.sharded_state_dict().items() if not key.endswith("._extra_state")}
    # As the trainer saves (core/strategy.py): writer processes shielded from stop signals, results collected here.
    with stop_signals_held():
        collect_write_results_here()
        dist_checkpointing.save(sharded, str(cfg.checkpoint_dir))
    _barrier()
    if rank_zero:
        checkpoints.mark_complete(
            CHECKPOINT_STEP,
            {
                "step": CHECKPOINT_STEP,
                "imported_from": cfg.run.huggingface_ckpt_path,
                FILES_KEY: checkpoint_manifest.record(cfg.checkpoint_dir),
            },
        )


def _barrier() -> None:
    import torch

    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()


def main(argv=None) -> int:
    import time

    from ...contract.schemas.hf_conversion import HFImportConfig
    from ..common.config import JobConfigError
    from ..common.report import JobFault, Summary, duration, print_error, size, size_of
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        with claimed_run(argv, f"python3 -m {PROGRAM}", HFImportConfig.from_dict, lambda cfg: cfg.writes()[0]) as (
            cfg,
            placement,
        ):
            result = import_folder(cfg)
            summary = Summary(f"import finished: {result.source} ({result.architecture})")
            summary.add(".nemo", f"{result.nemo_path} ({result.layout}, {size(size_of(result.nemo_path))})")
            summary.add("checkpoint", f"{result.checkpoint} ({size(size_of(result.checkpoint))})")
            summary.add("time", duration(time.monotonic() - started)).show(placement.rank)
        return 0
    except (JobConfigError, JobFault) as error:
        return print_error(error)


if __name__ == "__main__":
    sys.exit(main())
