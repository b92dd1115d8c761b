"""Data preparation stage: the chain of steps the dataset's schema lists (download -> extract -> preprocess, ...).

Every step is a job running `<the family's data package>.<step>` (launch/families.py), shaped as the schema's
StepPlan says: an array (one task per shard or node) or a single job, with its tasks per node, CPUs per task and
GPUs. An array step after an array step waits per item (item i for item i) unless it reads what every item
wrote; any other step waits for the whole step before it. Interactive runs do the steps
here in order, each over every item. All steps read the one resolved config of the stage, bound to the schema the
family's row names on both sides.
"""

from ..job_spec import JobSpec
from .base import Stage


class DataPreparationStage(Stage):
    kind = "data_preparation"

    def job_specs(self) -> list[JobSpec]:
        _, package, config, cfg = self.bind_family()
        return self.step_jobs(package, config, cfg)
