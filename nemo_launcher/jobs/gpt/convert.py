"""Conversion: a training checkpoint (megatron-core distributed checkpoint) -> one `.nemo` file, and a
Hugging Face checkpoint where an architecture computes the same model exactly.

    python3 -u -m nemo_launcher.jobs.gpt.convert --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.convert --config ...     (target TP x PP = 2)

One process per rank of the target layout (model.tensor_model_parallel_size x pipeline_model_parallel_size;
more processes are allowed and idle). Each builds its part of the model and lets dist_checkpointing read
its slice of the checkpoint, whatever TP/PP the checkpoint was trained with: that is the resharding.
The result goes to <run.results_dir>/results/<run.nemo_file_name> (written under a temporary name and
renamed, so a stage chained after this one sees the whole file or none). Rank 0 holds run.results_dir's
lock while it runs. Exit codes: 0 done, 2 configuration error, 74 a write failed for lack of space or
permission, 75 run.results_dir is in use by another job (one `Error:` line on stderr for each), anything
else a crash.

Only the standard library is imported at module level, as in train.py: megatron's checkpoint code may
spawn a helper process that re-imports this module.
"""
import logging
import sys
from pathlib import Path
from typing import Any, Dict

from ...contract.schemas.gpt_conversion import ConversionConfig

log = logging.getLogger("nemo_launcher.jobs.gpt.convert")


def find_checkpoint(folder: str, name: str) -> Path:
    """The checkpoint to convert: `folder` itself when it is a complete step folder, else by `name` in it."""
    from ..common.config import JobConfigError
    from ..core.checkpoints import MARKER, CheckpointFolder

    root = Path(folder)
    if (root / MARKER).is_file():
        return root
    checkpoints = CheckpointFolder(root)
    if name == "latest":
        newest = checkpoints.newest_complete()
        if newest is None:
            raise JobConfigError(f"model.checkpoint_folder: {root} holds no complete checkpoint (a step-<N> folder "
                                 f"with a {MARKER} marker); did the training run save one?")
        return newest
    chosen = root / name
    if not (chosen / MARKER).is_file():
        have = ", ".join(f"step-{s}" for s in checkpoints.steps()) or "none"
        raise JobConfigError(f"model.checkpoint_name: {chosen} is not a complete checkpoint; complete ones: {have}")
    return chosen


def training_model_section(cfg: ConversionConfig) -> Dict[str, Any]:
    """The training run's `model:` section (with any tokenizer file overrides) and its precision name."""
    from ..common.config import JobConfigError, load_resolved_config
    from ...contract.schemas.gpt_training import TrainingConfig

    try:
        training = load_resolved_config(Path(cfg.model.hparams_file))
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {error}") from None
    try:
        parsed = TrainingConfig.from_dict(training)
    except JobConfigError as error:
        raise JobConfigError(f"model.hparams_file: {cfg.model.hparams_file}: {error}") from None
    model = dict(training["model"])
    tokenizer = dict(model["tokenizer"])
    for key, value in (("vocab_file", cfg.model.vocab_file), ("merge_file", cfg.model.merge_file),
                       ("model", cfg.model.tokenizer_model)):
        if value is not None:
            tokenizer[key] = value
    model["tokenizer"] = tokenizer
    return {"model": model, "precision": parsed.trainer.precision_name()}


def main(argv=None) -> int:
    import time

    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.distributed import placement_from_env
    from ..common.quiet import start_job
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed

    started = time.monotonic()
    try:
        path = config_path_from_argv(argv, prog="python3 -m nemo_launcher.jobs.gpt.convert")
        rank = placement_from_env().rank
        start_job(rank)
        cfg = ConversionConfig.from_dict(load_resolved_config(path))
        with claimed(cfg.writes()[0], rank):
            from .converter import convert

            result = convert(cfg)
            conversion_summary(result, time.monotonic() - started).show(rank)
        return 0
    except (JobConfigError, JobFault) as error:
        return print_error(error)


def conversion_summary(result, seconds: float):
    from ..common.report import Summary, duration, size, size_of

    summary = Summary(f"conversion finished: {result.checkpoint}")
    summary.add(".nemo", f"{result.nemo_path} ({size(size_of(result.nemo_path))})")
    if result.hf_dir is not None:
        summary.add("Hugging Face", f"{result.hf_dir} ({result.hf_note}, {size(size_of(result.hf_dir))})")
    else:
        summary.add("Hugging Face", result.hf_note)
    return summary.add("time", duration(seconds))


if __name__ == "__main__":
    sys.exit(main())
