"""The CLIP training job: `python3 -m nemo_launcher.jobs.clip.train --config <resolved training yaml>`.

Trains to trainer.max_steps on image-caption WebDataset shards, writing TensorBoard events and checkpoints (with
the EMA weights when exp_manager.ema.enable) under exp_manager.explicit_log_dir; a rerun continues from the newest
complete checkpoint at the next unseen example. Signals, max_time, self-requeue, exit codes: the trainer core's
(nemo_launcher/jobs/core/program.py).
"""
import sys

PROG = "python3 -m nemo_launcher.jobs.clip.train"


def _recipe(cfg):
    from .recipe import clip_recipe

    return clip_recipe(cfg)


def _build(*args, **kwargs):
    from .recipe import build_clip_parts

    return build_clip_parts(*args, **kwargs)


def _module(parts):
    from .recipe import ClipModule

    return ClipModule(parts)


def main(argv=None) -> int:
    # The recipe's modules (torch, megatron-core, webdataset) load only once the core has installed its log filters.
    from ..core.program import run_program
    from ...contract.schemas.clip_training import ClipTrainingConfig

    return run_program(argv, PROG, ClipTrainingConfig, _recipe, build=_build, module_class=_module)


if __name__ == "__main__":
    sys.exit(main())
