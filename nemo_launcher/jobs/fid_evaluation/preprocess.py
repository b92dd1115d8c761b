"""preprocess: COCO-2014 val into what the FID/CLIP evaluation reads: every image as a centre-cropped image_size
PNG (preprocess_images) and num_captions captions sampled from captions_val2014.json, one .txt each
(preprocess_captions).

    python3 -u -m nemo_launcher.jobs.fid_evaluation.preprocess --config <job dir>/<run.name>_hydra.yaml
"""

from ..steps.config import run_step
from ..steps.step_report import StepReport
from .coco import step_main, write_caption_files, write_square_images


def write(cfg, report: StepReport) -> None:
    """The preprocessed sets of `cfg` (a CocoReferenceData: this step's config or an evaluation's reference_data)."""
    if cfg.preprocess_images:
        written, kept = write_square_images(cfg)
        report.done("images", output=cfg.images_output_dir)
        report.note("images", f"{written} written, {kept} kept, {cfg.image_size} px square")
    if cfg.preprocess_captions:
        count = write_caption_files(cfg)
        report.done("captions", output=cfg.captions_output_dir)
        report.note("captions", f"{count} sampled (seed {cfg.seed})")


main = step_main("preprocess", "set", write)


if __name__ == "__main__":
    run_step(main)
