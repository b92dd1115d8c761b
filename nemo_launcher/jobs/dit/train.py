"""The DiT training job: `python3 -m nemo_launcher.jobs.dit.train --config <resolved training yaml>`.

Trains to trainer.max_steps on mock latents or an Energon dataset, writing TensorBoard events and checkpoints under
exp_manager.explicit_log_dir; a rerun continues from the newest complete checkpoint, the Energon loader where it
stopped. Signals, max_time, self-requeue, exit codes: the trainer core's (nemo_launcher/jobs/core/program.py).
"""
import sys

PROG = "python3 -m nemo_launcher.jobs.dit.train"


def _recipe(cfg):
    from .recipe import dit_recipe

    return dit_recipe(cfg)


def _build(*args, **kwargs):
    from .recipe import build_dit_parts

    return build_dit_parts(*args, **kwargs)


def _module(parts):
    from .recipe import DitModule

    return DitModule(parts)


def main(argv=None) -> int:
    # The recipe's modules (torch, megatron-core, energon) load only once the core has installed its log filters.
    from ..core.program import run_program
    from ...contract.schemas.dit_training import DitTrainingConfig

    return run_program(argv, PROG, DitTrainingConfig, _recipe, build=_build, module_class=_module)


if __name__ == "__main__":
    sys.exit(main())
