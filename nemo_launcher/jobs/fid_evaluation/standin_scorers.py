"""standin_scorers: randomly initialised Inception and CLIP files in the real ones' formats (tiny configs; nothing
downloads here). See standins.py for what scores computed with them mean.

    python3 -u -m nemo_launcher.jobs.fid_evaluation.standin_scorers --config <job dir>/<run.name>_hydra.yaml
"""

from ..steps.config import run_step
from ..steps.step_report import StepReport
from .coco import step_main


def write(cfg, report: StepReport) -> None:
    """The stand-ins of `cfg` (a CocoReferenceData: this step's config or an evaluation's reference_data)."""
    from .standins import write_random_inception, write_tiny_clip

    spec = cfg.standin_scorers
    report.done("inception", output=write_random_inception(spec.inception_weights_path, spec.seed))
    report.done("clip", output=write_tiny_clip(spec.clip_model_path, spec.seed))


main = step_main("standin_scorers", "network", write)


if __name__ == "__main__":
    run_step(main)
