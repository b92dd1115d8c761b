"""The ViT training job: `python3 -m nemo_launcher.jobs.vit.train --config <resolved training yaml>`.

Trains the classifier to trainer.max_steps on ImageNet's class-folder layout, writing TensorBoard events and
checkpoints under exp_manager.explicit_log_dir; a rerun continues from the newest complete checkpoint at the next
unseen image. Signals, max_time, self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""
import sys

PROG = "python3 -m nemo_launcher.jobs.vit.train"


def _recipe(cfg):
    from .recipe import vit_recipe

    return vit_recipe(cfg)


def _build(*args, **kwargs):
    from .recipe import build_vit_parts

    return build_vit_parts(*args, **kwargs)


def _module(parts):
    from .recipe import VitModule

    return VitModule(parts)


def main(argv=None) -> int:
    # The recipe's modules (torch, megatron-core) load only once the core has installed its log filters.
    from ..core.program import run_program
    from ...contract.schemas.vit_training import VitTrainingConfig

    return run_program(argv, PROG, VitTrainingConfig, _recipe, build=_build, module_class=_module)


if __name__ == "__main__":
    sys.exit(main())
