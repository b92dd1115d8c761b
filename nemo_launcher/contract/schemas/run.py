"""The `run:` keys every stage shares. The launcher reads them to place and schedule the job; job programs
read `name` and `results_dir`. A stage schema extends `RunBase` with its own run keys."""

import dataclasses

from ..binding import absolute_path_fields, config_fault
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
