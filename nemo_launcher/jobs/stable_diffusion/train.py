"""The Stable Diffusion training job: `python3 -m nemo_launcher.jobs.stable_diffusion.train --config <resolved yaml>`.

Trains the UNet to trainer.max_steps on WebDataset shards (precached latents and text embeddings, or images and
captions), writing TensorBoard events and checkpoints under exp_manager.explicit_log_dir and, at the end,
checkpoints/nemo_stable_diffusion.nemo; a rerun continues from the newest complete checkpoint. Signals, max_time,
self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""
import sys

PROG = "python3 -m nemo_launcher.jobs.stable_diffusion.train"


def _recipe(cfg):
    from .recipe import sd_recipe

    return sd_recipe(cfg)


def _build(*args, **kwargs):
    from .recipe import build_sd_parts

    return build_sd_parts(*args, **kwargs)


def _module(parts):
    from .recipe import SdModule

    return SdModule(parts)


def main(argv=None) -> int:
    # torch, megatron-core, diffusers and transformers load only once the core has installed its log filters.
    from ..core.program import run_program
    from ...contract.schemas.stable_diffusion_training import StableDiffusionTrainingConfig

    return run_program(argv, PROG, StableDiffusionTrainingConfig, _recipe, build=_build, module_class=_module)


if __name__ == "__main__":
    sys.exit(main())
