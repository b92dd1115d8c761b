"""clip: the mean CLIP score (image-caption cosine) of each guidance scale's images -> clip_scores.csv.

python3 -u -m nemo_launcher.jobs.fid_evaluation.clip --config <job dir>/<run.name>_hydra.yaml
"""

import os

from nemo_launcher.contract.schemas.sd_evaluation import CLIP_SCORES

from ..steps.config import run_step
from ..steps.step_report import StepReport
from .evaluation import device, generated_images, load_config, load_images, read_captions, write_scores


def main(argv=None) -> StepReport:
    from .clip_score import ClipScorer

    cfg = load_config("clip", argv)
    report = StepReport("clip", unit="guidance scale")
    names, captions = read_captions(cfg)
    scorer = ClipScorer(cfg.clip_model_path, device())
    scores = {}
    for scale in cfg.fid.classifier_free_guidance:
        images = load_images(generated_images(cfg, scale, names), cfg.fid.image_size)
        scores[scale] = float(scorer.similarities(images, captions).mean())
        report.done(f"cfg {scale:g}")
        report.note(f"CLIP cfg {scale:g}", f"{scores[scale]:.4f}")
    os.makedirs(cfg.run.results_dir, exist_ok=True)
    path = os.path.join(cfg.run.results_dir, CLIP_SCORES)
    write_scores(path, "clip_score", scores, cfg.clip_version)
    report.note("scores", path)
    return report


if __name__ == "__main__":
    run_step(main)
