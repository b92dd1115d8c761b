"""fid: the Fréchet Inception distance of each guidance scale's images to the real COCO images -> fid_scores.csv.

    python3 -u -m nemo_launcher.jobs.fid_evaluation.fid --config <job dir>/<run.name>_hydra.yaml

Both sets are read at fid.image_size square; the real statistics and their covariance's square root
are computed once for every scale.
"""

import os

from nemo_launcher.contract.schemas.sd_evaluation import FID_SCORES

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.step_report import StepReport
from .evaluation import IMAGE_SUFFIXES, device, generated_images, load_config, load_images, read_captions, write_scores


def main(argv=None) -> StepReport:
    from .frechet import frechet_distance, psd_sqrt, statistics
    from .inception import inception_features, load_inception

    cfg = load_config("fid", argv)
    report = StepReport("fid", unit="guidance scale")
    names, _ = read_captions(cfg)
    real_folder = cfg.fid.coco_images_path
    real = (
        sorted(
            os.path.join(real_folder, name) for name in os.listdir(real_folder) if name.lower().endswith(IMAGE_SUFFIXES)
        )
        if os.path.isdir(real_folder)
        else []
    )
    if len(real) < 2:
        raise DataPrepError(
            f"evaluation.fid.coco_images_path={real_folder!r}: FID needs at least 2 images, found {len(real)}"
        )
    network = load_inception(cfg.inception_weights_path, device())
    size = cfg.fid.image_size
    real_stats = statistics(inception_features(network, load_images(real, size)))
    real_root = psd_sqrt(real_stats[1])
    scores = {}
    for scale in cfg.fid.classifier_free_guidance:
        fake = statistics(inception_features(network, load_images(generated_images(cfg, scale, names), size)))
        scores[scale] = frechet_distance(*real_stats, *fake, root_a=real_root)
        report.done(f"cfg {scale:g}")
        report.note(f"FID cfg {scale:g}", f"{scores[scale]:.4f}")
    os.makedirs(cfg.run.results_dir, exist_ok=True)
    path = os.path.join(cfg.run.results_dir, FID_SCORES)
    write_scores(path, "fid", scores, os.path.basename(cfg.model.restore_from_path))
    report.note("real images", len(real))
    report.note("scores", path)
    return report


if __name__ == "__main__":
    run_step(main)
