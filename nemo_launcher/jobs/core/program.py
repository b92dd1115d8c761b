"""The training program every family runs: config, lock, logging, parts, the Lightning trainer, summary, exit codes.

    def main(argv=None) -> int:                      # a family's train.py
        from ..core.program import run_program
        from ...contract.schemas.t5_training import T5TrainingConfig
        return run_program(argv, "python3 -m nemo_launcher.jobs.t5.train", T5TrainingConfig, _recipe)

`load_recipe(cfg)` is called with the bound config (a recipe may depend on it: BERT reports the sentence-order
loss only with its binary head), after the log filters are installed, so the family's modules (which import
torch and megatron-core) load quietly and only for a config that binds.

Reads the resolved `training` section the launcher wrote, trains to trainer.max_steps (derived from the data set
when trainer.max_epochs sizes the run: run_length.py), and writes
TensorBoard events and checkpoints under exp_manager.explicit_log_dir. A rerun of the same command
continues from the newest complete checkpoint. SIGTERM/SIGUSR1 and trainer.max_time save a checkpoint
and exit 0, so a requeued job goes on where it stopped. Rank 0 holds explicit_log_dir's lock while the
job runs (common/run_directory.py): one writer per run. Exit codes: 0 done or stopped cleanly,
2 configuration error, 74 a checkpoint could not be written (disk full, no permission: nothing is requeued,
the newest complete checkpoint is kept) or none can be read as it was saved (resume.py), 75 explicit_log_dir is
in use by another job (nothing was written); each of these prints one `Error:` line on stderr. Anything else is a crash.

Only the standard library is imported at module level: dist_checkpointing starts a helper process by
spawning, which re-imports the program's module; it must not pay for torch and megatron a second time.
A family's train.py must keep its own module level as light, and guard its entry with `__name__ == "__main__"`.
"""

import logging
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path

from .recipe import Recipe
from .summary import TrainingOutcome, training_summary

log = logging.getLogger("nemo_launcher.jobs.core")


def run_program(
    argv: Sequence[str] | None,
    prog: str,
    schema,
    load_recipe: Callable[[object], Recipe],
    build: Callable | None = None,
    module_class: type | None = None,
) -> int:
    """The whole program; returns its exit status. `schema`: the family's training config class (from_dict).

    Tuning programs start from a model instead of random weights: `build` replaces parts.build_parts (same
    arguments: recipe, cfg, placement, on_gpu, resume), and `module_class` the TrainingModule (a subclass that
    validates its own way, or writes the tuned model in `write_outputs`)."""
    started = time.monotonic()
    from ..common.config import JobConfigError
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed_run

    try:
        with claimed_run(argv, prog, schema.from_dict, attrgetter("exp_manager.explicit_log_dir")) as (cfg, placement):
            from ..common.numa import apply_numa_mapping

            # Before torch starts its thread pools, which size themselves by the CPUs this process may use.
            cpus = apply_numa_mapping()
            if cpus is not None:
                log.info("numa_mapping: pinned to CPUs %s", ",".join(map(str, cpus)))
            return _train(load_recipe(cfg), cfg, placement, started, build, module_class)
    except (JobConfigError, JobFault) as error:
        return print_error(error)


def _train(recipe, cfg, placement, started: float, build, module_class) -> int:
    from .callbacks import MetricsWriter, StopSignals, StopTraining, evaluation_report, gather_objects
    from .checkpoints import CheckpointFolder
    from .parts import build_parts, init_processes, shutdown
    from .resume import resume_path
    from .run_length import run_in_steps

    # Before anything is written: too few samples, or a warm-up longer than the derived run, is a config error.
    cfg, sizing = run_in_steps(cfg, recipe)
    signals = StopSignals()
    max_time_s = cfg.trainer.max_time_seconds()
    folder = CheckpointFolder(Path(cfg.exp_manager.explicit_log_dir) / "checkpoints")
    try:
        rank_zero = placement.rank == 0
        writer = MetricsWriter(_loggers(cfg) if rank_zero else [], rank_zero)
        if sizing is not None:
            writer.say(f"run length: {sizing}")
        if rank_zero:
            from .code_versions import write_code_versions

            write_code_versions(Path(cfg.run.results_dir))
        on_gpu = init_processes(recipe, cfg, placement)
        # After the process group exists: the ranks share the checking of the checkpoint's files (resume.py).
        resume = resume_path(
            folder, cfg.exp_manager, placement.rank, placement.world_size, gather_objects(placement.world_size)
        )
        resume = resume or starting_checkpoint(getattr(cfg.model, "resume_from_checkpoint", None))
        parts = (build or build_parts)(recipe, cfg, placement, on_gpu, resume)
        _announce(parts, writer, resume)
        trainer, module, progress, stopper = _lightning(
            parts, writer, folder, signals, started, max_time_s, module_class
        )
        stopped = False
        try:
            trainer.fit(module, ckpt_path=str(resume) if resume else None)
        except StopTraining:
            stopped = True
        test_loss, outputs = None, {}
        if not stopped and trainer.global_step >= cfg.trainer.max_steps:
            test_loss = module.evaluate_test_split()
            if test_loss is not None:
                metrics, text = evaluation_report("test", module.last_test_losses, recipe)
                writer.write(metrics, trainer.global_step)
                writer.say(f"test step={trainer.global_step} {text}")
            outputs = module.write_outputs()
        writer.finalize("success")
        if rank_zero:
            _mark_resume_needed(
                Path(cfg.exp_manager.explicit_log_dir), stopped and trainer.global_step < cfg.trainer.max_steps
            )
        rate = progress.timed_tokens / progress.train_seconds if progress.train_seconds > 0 else None
        outcome = TrainingOutcome(
            step=trainer.global_step,
            first_step=progress.first_step,
            tokens=progress.tokens,
            tokens_per_sec=rate,
            seconds=time.monotonic() - started,
            train_loss=progress.last_loss,
            train_loss_step=progress.last_loss_step,
            val_loss=module.last_val_loss,
            test_loss=test_loss,
            stop_reason=stopper.stop_reason if stopped else None,
            newest_checkpoint=folder.newest_complete(),
            extra_train_losses=progress.last_extra_losses,
            val_metrics=dict(module.last_val_metrics),
            outputs=outputs,
        )
        extra = recipe.summary_items(parts.cfg, outcome) if recipe.summary_items else ()
        training_summary(cfg, outcome, extra).show(placement.rank)
    finally:
        shutdown()
    return 0


def starting_checkpoint(path: str | None) -> Path | None:
    """model.resume_from_checkpoint: where a run with no checkpoint of its own starts from (a complete step folder)."""
    if not path:
        return None
    from ...contract import CHECKPOINT_COMPLETE_MARKER
    from ..common.config import JobConfigError

    if not (Path(path) / CHECKPOINT_COMPLETE_MARKER).is_file():
        raise JobConfigError(
            f"model.resume_from_checkpoint: {path} is not a complete checkpoint folder (no "
            f"{CHECKPOINT_COMPLETE_MARKER} in it); name a step-<N> folder a finished save wrote"
        )
    return Path(path)


def _mark_resume_needed(log_dir, needed: bool) -> None:
    """Tells the Slurm script whether to requeue the job: the run stopped early and saved, or it is done."""
    from ...contract import RESUME_MARKER

    marker = log_dir / RESUME_MARKER
    if needed:
        log_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text("stopped before trainer.max_steps after saving a checkpoint; the next attempt resumes\n")
    else:
        marker.unlink(missing_ok=True)


def _loggers(cfg):
    from ..common.config import JobConfigError

    exp = cfg.exp_manager
    loggers = []
    if exp.create_tensorboard_logger:
        from pytorch_lightning.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(save_dir=exp.explicit_log_dir, name="", version=""))
    if exp.create_wandb_logger:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise JobConfigError(
                "exp_manager.create_wandb_logger: true, but the wandb package is not installed"
            ) from None
        from pytorch_lightning.loggers import WandbLogger

        loggers.append(WandbLogger(save_dir=exp.explicit_log_dir, **exp.wandb_logger_kwargs))
    return loggers


def _announce(parts, writer, resume) -> None:
    from .optim import describe

    cfg, layout = parts.cfg, parts.layout
    wrapper, inner = describe(parts.optimizer)
    local_params = sum(p.numel() for chunk in parts.bare_chunks for p in chunk.parameters())
    writer.say(
        f"run {cfg.run.name}: {parts.placement.world_size} processes ({parts.placement.source}), "
        f"TP={layout['tp']} PP={layout['pp']} VPP={layout['vpp']} DP={layout['dp']}, "
        f"{'GPU' if parts.on_gpu else 'CPU'}, {cfg.trainer.precision_name()}, "
        f"layer spec {'transformer_engine' if parts.use_te else 'local'}, optimizer {wrapper}({inner}), "
        f"{local_params:,} parameters on rank 0"
        # Families that read no text (DiT's latents) have no vocabulary.
        + (f", vocab {parts.vocab_size} (padded)" if parts.tokenizer is not None else "")
    )
    writer.say(f"data: {parts.describe_data()}; {len(parts.train_dataset)} training samples")
    writer.say(f"resuming from {resume}" if resume else "starting from scratch (no checkpoint to resume from)")


def _lightning(parts, writer, folder, signals, started: float, max_time_s, module_class=None):
    import pytorch_lightning as pl
    import torch

    from .callbacks import CheckpointAndStop, ProgressLogger, StepClock
    from .flops import peak_bf16_flops
    from .module import TrainingModule
    from .step_hooks import step_hooks
    from .strategy import MegatronStrategy

    cfg, recipe = parts.cfg, parts.recipe
    peak = None
    if parts.on_gpu:
        name = torch.cuda.get_device_name()
        peak = peak_bf16_flops(name)
        if peak is None:
            log.warning("no peak FLOP/s known for %s: MFU is not logged", name)
    clock = StepClock()
    flops = recipe.flops_per_token(cfg.model, parts.vocab_size) if recipe.flops_per_token else None
    timer, *hooks = step_hooks(parts, writer.say)
    progress = ProgressLogger(parts, writer, clock, flops, peak, timer)
    stopper = CheckpointAndStop(parts, writer, clock, folder, signals, started, max_time_s)
    validating = parts.valid_dataset is not None and cfg.trainer.limit_val_batches > 0
    trainer = pl.Trainer(
        accelerator="gpu" if parts.on_gpu else "cpu",
        devices=cfg.trainer.devices,
        num_nodes=cfg.trainer.num_nodes,
        strategy=MegatronStrategy(parts.placement, cfg.trainer.devices, "nccl" if parts.on_gpu else "gloo"),
        precision="32-true",  # mixed precision is megatron's (Float16Module + fp32 master weights)
        max_steps=cfg.trainer.max_steps,
        max_epochs=-1,  # the run is one pass of a dataset sized for max_steps
        val_check_interval=cfg.trainer.val_check_interval,
        check_val_every_n_epoch=None,  # validation every val_check_interval steps, counted over the run
        limit_val_batches=cfg.trainer.limit_val_batches if validating else 0,
        num_sanity_val_steps=0,
        logger=False,  # metrics go through MetricsWriter, at our log points only
        enable_checkpointing=False,  # CheckpointAndStop saves
        enable_progress_bar=False,  # ProgressLogger prints one line per log point instead
        enable_model_summary=False,
        use_distributed_sampler=False,  # our samplers split data by data-parallel rank, not by world rank
        inference_mode=False,  # no_grad instead: megatron's pipeline sends in-place into received buffers
        default_root_dir=cfg.exp_manager.explicit_log_dir,
        callbacks=[timer, progress, stopper, *hooks],  # the timer ends each step before it is reported
    )
    return trainer, (module_class or TrainingModule)(parts), progress, stopper
