"""reference_data: the evaluation's own first step when its config has a `reference_data` section (tiny configs):
the steps data_preparation=fid_evaluation/* would run (generate_shapes, standin_scorers, preprocess) on that section,
one after another in this job, so one pipeline can prepare the training data and still evaluate against COCO's
stand-in (a pipeline has one data_preparation stage).

    python3 -u -m nemo_launcher.jobs.fid_evaluation.reference_data --config <job dir>/<run.name>_hydra.yaml
"""

from ..steps.config import run_step
from ..steps.step_report import StepReport
from . import generate_shapes, preprocess, standin_scorers
from .evaluation import load_config

_STEPS = {"generate_shapes": generate_shapes, "standin_scorers": standin_scorers, "preprocess": preprocess}


def main(argv=None) -> StepReport:
    data = load_config("reference_data", argv).reference_data
    report = StepReport("reference_data", unit="part")
    for plan in data.steps():
        _STEPS[plan.name].write(data, report)
    return report


if __name__ == "__main__":
    run_step(main)
