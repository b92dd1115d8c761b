"""generate_shapes: a COCO-2014-format stand-in of coloured shapes where the real val2014 files would go (tiny configs).

python3 -u -m nemo_launcher.jobs.fid_evaluation.generate_shapes --config <job dir>/<run.name>_hydra.yaml
"""

from ..steps.config import run_step
from ..steps.step_report import StepReport
from .coco import step_main, write_coco_shapes


def write(cfg, report: StepReport) -> None:
    """The stand-in of `cfg` (a CocoReferenceData: this step's config or an evaluation's reference_data)."""
    spec = cfg.generate_shapes
    write_coco_shapes(cfg.coco_images_dir, cfg.coco_captions_file, spec.num_images, spec.image_size, spec.seed)
    report.done("coco2014 stand-in", output=cfg.coco_images_dir)
    report.note("images", f"{spec.num_images} of {spec.image_size} px, two captions each, in {cfg.coco_images_dir}")
    report.note("captions", cfg.coco_captions_file)


main = step_main("generate_shapes", "set", write)


if __name__ == "__main__":
    run_step(main)
