"""The InstructPix2Pix training job: `python3 -m nemo_launcher.jobs.stable_diffusion.instruct_pix2pix_train --config
<resolved yaml>`.

Fine-tunes the Stable Diffusion checkpoint of model.ckpt_path (its UNet widened to read the input image's latents)
on the edit triples under model.data.data_path (edit_data.py), and writes checkpoints/nemo_instruct_pix2pix.nemo at
the end, which fw_inference=instruct_pix2pix/edit_cli reads. The rest (resume, signals, exit codes) is the trainer
core's; the loss and the .nemo are Stable Diffusion's (recipe.py, finetune.py).
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.stable_diffusion.instruct_pix2pix_train"


def main(argv=None) -> int:
    # torch and the libraries load only once the core has installed its log filters.
    from ...contract.schemas.sd_finetuning import InstructPix2PixTrainingConfig
    from .finetune import run_finetune

    return run_finetune(argv, PROG, InstructPix2PixTrainingConfig, "nemo_launcher.jobs.stable_diffusion.edit_data")


if __name__ == "__main__":
    sys.exit(main())
