"""GPT pre-training: megatron-core model, PyTorch Lightning loop.

    python3 -u -m nemo_launcher.jobs.gpt.train --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.train --config ...     (several processes here)
    srun python3 -u -m nemo_launcher.jobs.gpt.train --config ...                  (Slurm)

Reads the resolved `training` section the launcher wrote, trains to trainer.max_steps, and writes
TensorBoard events and checkpoints under exp_manager.explicit_log_dir. A rerun of the same command
continues from the newest complete checkpoint. SIGTERM/SIGUSR1 and trainer.max_time save a checkpoint
and exit 0, so a requeued job goes on where it stopped. Rank 0 holds explicit_log_dir's lock while the
job runs (common/run_directory.py): one writer per run. Exit codes: 0 done or stopped cleanly,
2 configuration error, 74 a checkpoint could not be written (disk full, no permission: nothing is requeued,
the newest complete checkpoint is kept), 75 explicit_log_dir is in use by another job (nothing was
written); each of these prints one `Error:` line on stderr. Anything else is a crash.

Only the standard library is imported at module level: dist_checkpointing starts a helper process by
spawning, which re-imports this module; it must not pay for torch and megatron a second time.
"""
import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("nemo_launcher.jobs.gpt")


def main(argv=None) -> int:
    started = time.monotonic()
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.distributed import placement_from_env
    from ..common.quiet import start_job
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed

    try:
        path = config_path_from_argv(argv, prog="python3 -m nemo_launcher.jobs.gpt.train")
        placement = placement_from_env()
        start_job(placement.rank)
        from ...contract.schemas.gpt_training import TrainingConfig

        cfg = TrainingConfig.from_dict(load_resolved_config(path))
        with claimed(cfg.exp_manager.explicit_log_dir, placement.rank):
            from ..common.numa import apply_numa_mapping

            # Before torch starts its thread pools, which size themselves by the CPUs this process may use.
            cpus = apply_numa_mapping()
            if cpus is not None:
                log.info("numa_mapping: pinned to CPUs %s", ",".join(map(str, cpus)))
            return _train(cfg, placement, started)
    except (JobConfigError, JobFault) as error:
        return print_error(error)


def _train(cfg, placement, started: float) -> int:
    from .callbacks import MetricsWriter, StopSignals, StopTraining, resume_path
    from .checkpoints import CheckpointFolder
    from .parts import build_parts, init_processes, shutdown

    signals = StopSignals()
    max_time_s = cfg.trainer.max_time_seconds()
    folder = CheckpointFolder(Path(cfg.exp_manager.explicit_log_dir) / "checkpoints")
    try:
        rank_zero = placement.rank == 0
        writer = MetricsWriter(_loggers(cfg) if rank_zero else [], rank_zero)
        resume = resume_path(folder, cfg.exp_manager.resume_if_exists, cfg.exp_manager.resume_ignore_no_checkpoint)
        on_gpu = init_processes(cfg, placement)
        parts = build_parts(cfg, placement, on_gpu, resume)
        _announce(parts, writer, resume)
        trainer, module, progress, stopper = _lightning(parts, writer, folder, signals, started, max_time_s)
        stopped = False
        try:
            trainer.fit(module, ckpt_path=str(resume) if resume else None)
        except StopTraining:
            stopped = True
        test_loss = None
        if not stopped and trainer.global_step >= cfg.trainer.max_steps:
            test_loss = module.evaluate_test_split()
            if test_loss is not None:
                writer.write({"test_loss": test_loss}, trainer.global_step)
                writer.say(f"test step={trainer.global_step} test_loss={test_loss:.4f}")
        writer.finalize("success")
        if rank_zero:
            _mark_resume_needed(Path(cfg.exp_manager.explicit_log_dir), stopped and trainer.global_step < cfg.trainer.max_steps)
        rate = progress.timed_tokens / progress.train_seconds if progress.train_seconds > 0 else None
        outcome = TrainingOutcome(step=trainer.global_step, first_step=progress.first_step, tokens=progress.tokens,
                                  tokens_per_sec=rate, seconds=time.monotonic() - started,
                                  train_loss=progress.last_loss, train_loss_step=progress.last_loss_step,
                                  val_loss=module.last_val_loss, test_loss=test_loss,
                                  stop_reason=stopper.stop_reason if stopped else None, newest_checkpoint=folder.newest_complete())
        training_summary(cfg, outcome).show(placement.rank)
    finally:
        shutdown()
    return 0


@dataclasses.dataclass(frozen=True)
class TrainingOutcome:
    """What one attempt did, for its closing summary."""

    step: int  # the global step reached
    first_step: int  # the step this attempt resumed from (0: from scratch)
    tokens: int  # trained this attempt, all ranks together
    tokens_per_sec: Optional[float]  # over the training steps alone (validation and saving excluded)
    seconds: float  # this attempt's wall time, start-up included
    train_loss: Optional[float]
    train_loss_step: int
    val_loss: Optional[float]
    test_loss: Optional[float]
    stop_reason: Optional[str]  # set when a signal or max_time stopped it before max_steps
    newest_checkpoint: Optional[Path]


def training_summary(cfg, outcome: TrainingOutcome):
    from ..common.report import Summary, count, duration

    exp = cfg.exp_manager
    max_steps = cfg.trainer.max_steps
    if outcome.stop_reason:
        follow_up = ("the next attempt resumes from its checkpoint" if exp.create_checkpoint_callback
                     else "no checkpoint was saved (exp_manager.create_checkpoint_callback: false), so a rerun starts over")
        title = f"training stopped at step={outcome.step} of {max_steps}: {outcome.stop_reason}; {follow_up}"
    else:
        title = f"training finished at step={outcome.step} of {max_steps}"
    done = outcome.step - outcome.first_step
    steps = f"{done} this attempt" + (f" (resumed from step {outcome.first_step})" if outcome.first_step else "")
    rate = f" ({count(outcome.tokens_per_sec)} tokens/s)" if outcome.tokens_per_sec else ""
    summary = Summary(title).add("steps", steps).add("tokens", f"{count(outcome.tokens)}{rate}")
    summary.add("time", duration(outcome.seconds))
    if outcome.train_loss is not None:
        summary.add("train loss", f"{outcome.train_loss:.4f} (step {outcome.train_loss_step})")
    summary.add("val loss", None if outcome.val_loss is None else f"{outcome.val_loss:.4f}")
    summary.add("test loss", None if outcome.test_loss is None else f"{outcome.test_loss:.4f}")
    if exp.create_checkpoint_callback:
        newest = outcome.newest_checkpoint
        summary.add("checkpoints", f"{Path(exp.explicit_log_dir) / 'checkpoints'}"
                    + (f" (newest: {newest.name})" if newest is not None else " (none complete)"))
    summary.add("TensorBoard", exp.explicit_log_dir if exp.create_tensorboard_logger else None)
    return summary


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
            raise JobConfigError("exp_manager.create_wandb_logger: true, but the wandb package is not installed") from None
        from pytorch_lightning.loggers import WandbLogger

        loggers.append(WandbLogger(save_dir=exp.explicit_log_dir, **exp.wandb_logger_kwargs))
    return loggers


def _announce(parts, writer, resume) -> None:
    from .data import dataset_description
    from .optim import describe

    cfg, layout = parts.cfg, parts.layout
    wrapper, inner = describe(parts.optimizer)
    local_params = sum(p.numel() for chunk in parts.bare_chunks for p in chunk.parameters())
    writer.say(
        f"run {cfg.run.name}: {parts.placement.world_size} processes ({parts.placement.source}), "
        f"TP={layout['tp']} PP={layout['pp']} VPP={layout['vpp']} DP={layout['dp']}, "
        f"{'GPU' if parts.on_gpu else 'CPU'}, {cfg.trainer.precision_name()}, "
        f"layer spec {'transformer_engine' if parts.use_te else 'local'}, optimizer {wrapper}({inner}), "
        f"{local_params:,} parameters on rank 0, vocab {parts.vocab_size} (padded)"
    )
    writer.say(f"data: {dataset_description(parts.blend)}; {len(parts.train_dataset)} training samples")
    writer.say(f"resuming from {resume}" if resume else "starting from scratch (no checkpoint to resume from)")


def _lightning(parts, writer, folder, signals, started: float, max_time_s):
    import pytorch_lightning as pl
    import torch

    from .callbacks import CheckpointAndStop, ProgressLogger, StepClock
    from .flops import model_flops_per_token, peak_bf16_flops
    from .module import GPTModule
    from .strategy import MegatronStrategy

    cfg = parts.cfg
    peak = None
    if parts.on_gpu:
        name = torch.cuda.get_device_name()
        peak = peak_bf16_flops(name)
        if peak is None:
            log.warning("no peak FLOP/s known for %s: MFU is not logged", name)
    clock = StepClock()
    progress = ProgressLogger(parts, writer, clock, model_flops_per_token(cfg.model, parts.vocab_size), peak)
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
        callbacks=[progress, stopper],
    )
    return trainer, GPTModule(parts), progress, stopper


if __name__ == "__main__":
    sys.exit(main())
