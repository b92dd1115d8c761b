"""plot: the FID-CLIP curve, one point per guidance scale -> fid_clip_plot.pdf. With `targets` (a benchmark's quality
bar), the plot shows it as dashed lines and quality_targets.json says, per guidance scale, which targets are met.

    python3 -u -m nemo_launcher.jobs.fid_evaluation.plot --config <job dir>/<run.name>_hydra.yaml
"""

import json
import os

from nemo_launcher.contract.schemas.sd_evaluation import CLIP_SCORES, FID_SCORES, PLOT, TARGETS_REPORT

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.step_report import StepReport
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
        raise DataPrepError(
            f"{cfg.run.results_dir}: {FID_SCORES} and {CLIP_SCORES} share no guidance scale; run fid and clip"
        )
    figure, axes = pyplot.subplots(figsize=(5, 4))
    axes.plot(
        [clip[s] for s in scales], [fid[s] for s in scales], marker="o", label=cfg.run.model_train_name or "model"
    )
    for scale in scales:
        axes.annotate(f"{scale:g}", (clip[scale], fid[scale]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if cfg.targets is not None:
        _report_targets(cfg, scales, fid, clip, axes, report)
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


def _report_targets(cfg, scales, fid, clip, axes, report: StepReport) -> None:
    targets = cfg.targets
    if targets.fid is not None:
        axes.axhline(targets.fid, linestyle="--", color="grey", label=f"FID target <= {targets.fid:g}")
    if targets.clip_score is not None:
        axes.axvline(targets.clip_score, linestyle="--", color="black", label=f"CLIP target >= {targets.clip_score:g}")
    per_scale = {
        f"{scale:g}": {"fid": fid[scale], "clip_score": clip[scale], **targets.met(fid[scale], clip[scale])}
        for scale in scales
    }
    reached = [scale for scale, row in per_scale.items() if row["all_met"]]
    path = os.path.join(cfg.run.results_dir, TARGETS_REPORT)
    with open(path + ".tmp", "w") as handle:
        json.dump(
            {
                "targets": {"fid_at_most": targets.fid, "clip_score_at_least": targets.clip_score},
                "reached_at_guidance_scales": reached,
                "per_guidance_scale": per_scale,
            },
            handle,
            indent=1,
        )
    os.replace(path + ".tmp", path)
    report.note(
        "quality targets", f"met at guidance scale {', '.join(reached)}" if reached else "not met at any guidance scale"
    )
    report.done(TARGETS_REPORT, output=path)


if __name__ == "__main__":
    run_step(main)
