"""ViT fine-tuning: a pretrained ViT .nemo trained further on ImageNet's class folders, on the trainer core.

    python3 -u -m nemo_launcher.jobs.vit.finetune --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.vit.finetune --config ...      (several processes here)

Reads the resolved `fine_tuning` section (schema: contract/schemas/vit_finetuning.py), restores
model.restore_from_path at the new resolution with a new head (finetuning.py), and trains trainer.max_steps steps,
validating top-1 accuracy on the second data folder. TensorBoard events and step-<N> checkpoints go to
exp_manager.explicit_log_dir; a rerun continues from the newest complete checkpoint. At the end the model is
written to <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo. Exit codes as every trainer's (core/program.py).

Only the standard library and the contract are imported at module level: dist_checkpointing starts a helper
process by spawning, which re-imports this module.
"""

import sys

from ...contract.schemas.vit_finetuning import VitFinetuneConfig
from ..core.entry import training_main

# torch, megatron-core and Lightning load only once run_program has set up the job's logging.
main = training_main(
    "python3 -m nemo_launcher.jobs.vit.finetune",
    VitFinetuneConfig,
    f"{__package__}.finetuning",
    recipe="finetune_recipe",
    build="build_finetune_parts",
    module="VitFinetuneModule",
)

if __name__ == "__main__":
    sys.exit(main())
