"""The DreamBooth training job: `python3 -m nemo_launcher.jobs.stable_diffusion.dreambooth_train --config
<resolved yaml>`.

Fine-tunes the Stable Diffusion .nemo of model.restore_from_path on the subject's photos (model.data.instance_dir,
captioned by instance_prompt) and, with prior preservation, on class images (regularization_dir, filled up to
num_reg_images by that .nemo's text-to-image first: dreambooth_data.py); writes checkpoints/nemo_dreambooth.nemo at
the end, which fw_inference=dreambooth/text2img reads. The rest is the trainer core's and Stable Diffusion's.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.stable_diffusion.dreambooth_train"


def main(argv=None) -> int:
    # torch and the libraries load only once the core has installed its log filters.
    from ...contract.schemas.sd_finetuning import DreamBoothTrainingConfig
    from .finetune import run_finetune

    return run_finetune(argv, PROG, DreamBoothTrainingConfig, "nemo_launcher.jobs.stable_diffusion.dreambooth_data")


if __name__ == "__main__":
    sys.exit(main())
