"""The `run:` keys every stage shares. The launcher reads them to place and schedule the job; job programs
read `name` and `results_dir`. A stage schema extends `RunBase` with its own run keys; a job that runs a saved model
in one process extends `OneProcessRun`, and its schema mixes in `SavedModelStage`."""

import dataclasses
from typing import ClassVar

from ..binding import StageSchema, absolute_path_fields, config_fault, field_fault
from ..durations import SlurmTime


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunBase:
    name: str  # the job's name and the last folder of its default results_dir; one path component
    results_dir: str  # absolute path of the job directory: resolved config, script, logs, results
    time_limit: SlurmTime  # Slurm --time, e.g. "4:00:00" or "6-00:00:00"
    # How the job waits: comma-separated singleton, afterok/afterany/afternotok/aftercorr (for the stage before),
    # or type:jobid items for outside jobs. null = afterok on the stage before.
    dependency: str | None = None

    def check(self, key: str) -> None:
        name = self.name
        if not name or "/" in name or name in (".", "..") or any(c in name for c in "\n\r\0"):
            raise config_fault(f"{key}.name", name, "a run name is one path component: no slashes, line breaks or NULs")
        absolute_path_fields(self, key, "results_dir")


class OneProcess:
    """Mixed into the run section (a RunBase with nodes and ntasks_per_node) of a job that runs in one process: the
    seed's nodes and ntasks_per_node keys stay, and must be 1; `one_process_fix` says so in the family's words."""

    one_process_fix: ClassVar[str]

    def check(self, key: str) -> None:
        super().check(key)
        if (self.nodes, self.ntasks_per_node) != (1, 1):
            raise field_fault(self, key, "ntasks_per_node", self.one_process_fix)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OneProcessRun(OneProcess, RunBase):
    """The run section of a one-process job that reads what a training run wrote."""

    model_train_name: str | None = None  # the training run whose model is read (names the default paths)
    nodes: int = 1
    ntasks_per_node: int = 1


class SavedModelStage(StageSchema):
    """Mixed into the schema of a stage whose job runs a saved model (`model.restore_from_path`, a .nemo): it reads
    that file and the inputs `input_reads()` names."""

    def reads(self) -> list[tuple[str, str]]:
        return [(f"{self.stage}.model.restore_from_path", self.model.restore_from_path), *self.input_reads()]

    def input_reads(self) -> list[tuple[str, str]]:
        """(key, path) of what the job reads besides the model."""
        return []
