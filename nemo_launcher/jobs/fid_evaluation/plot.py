"""plot: the FID-CLIP curve, one point per guidance scale -> fid_clip_plot.pdf.

    python3 -u -m nemo_launcher.jobs.fid_evaluation.plot --config <job dir>/<run.name>_hydra.yaml
"""
import os

from nemo_launcher.contract.schemas.sd_evaluation import CLIP_SCORES, FID_SCORES, PLOT

from ..data.config import run_step
from ..data.errors import DataPrepError
from ..data.step_report import StepReport
from .evaluation import load_config, read_scores


def main(argv=None) -> StepReport:
    import matplotlib

    matplotlib.use("Agg")  # a batch job has no display
    from matplotlib import pyplot

    cfg = load_config("plot", argv)
    report = StepReport("plot", unit="file")
    fid = read_scores(os.path.join(cfg.run.results_dir, FID_SCORES), "fid")
    clip = read_scores(os.path.join(cfg.run.results_dir, CLIP_SCORES), "clip_score")
    scales = [scale for scale in cfg.fid.classifier_free_guidance if scale in fid and scale in clip]
    if not scales:
        raise DataPrepError(f"{cfg.run.results_dir}: {FID_SCORES} and {CLIP_SCORES} share no guidance scale; run fid and clip")
    figure, axes = pyplot.subplots(figsize=(5, 4))
    axes.plot([clip[s] for s in scales], [fid[s] for s in scales], marker="o", label=cfg.run.model_train_name or "model")
    for scale in scales:
        axes.annotate(f"{scale:g}", (clip[scale], fid[scale]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    axes.set_xlabel(f"CLIP score ({cfg.clip_version})")
    axes.set_ylabel("FID")
    axes.set_title("FID-CLIP, one point per guidance scale")
    axes.legend()
    figure.tight_layout()
    path = os.path.join(cfg.run.results_dir, PLOT)
    figure.savefig(path)
    pyplot.close(figure)
    report.done(PLOT, output=path)
    return report


if __name__ == "__main__":
    run_step(main)
