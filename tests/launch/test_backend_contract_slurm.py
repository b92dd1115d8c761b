"""The Slurm backend passes the backend contract (tests/launch/backend_contract.py).

Its script runs under bash as the batch step would, with `srun` and `scontrol` stand-ins (srun drops its own
options and runs the rest); submissions go to test_submission.py's fake sbatch/squeue/scancel. What sbatch is
given (#SBATCH lines, --dependency on the command line) is read back with this module's own table of Slurm's
words, independent of the backend's."""

import os
import re
from datetime import timedelta
from pathlib import Path

from nemo_launcher.contract.durations import SlurmTime
from nemo_launcher.contract.file_numbers import parse_file_numbers
from nemo_launcher.launch.backends.slurm import SlurmBackend
from nemo_launcher.launch.job_spec import Dependency, Wait

from .backend_contract import BackendContract, write_tool
from .test_submission import _calls, _fake_slurm

SLURM_TYPES = {
    "afterok": Dependency.AFTER_SUCCESS,
    "afterany": Dependency.AFTER_ANY_END,
    "afternotok": Dependency.AFTER_FAILURE,
    "aftercorr": Dependency.AFTER_CORRESPONDING_ITEM,
    "after": Dependency.AFTER_START,
    "singleton": Dependency.SINGLETON,
}
FAKE_SRUN = '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done\nexec "$@"\n'


def _sbatch_value(text: str, option: str) -> str | None:
    match = re.search(rf"^#SBATCH --{option}=(.*)$", text, re.MULTILINE)
    return match.group(1) if match else None


class TestSlurmContract(BackendContract):
    cluster_type = "bcm"
    runs_here = False

    def tools(self, tmp: Path) -> dict[str, str]:
        bin_dir = tmp / "slurm_bin"
        write_tool(bin_dir, "srun", FAKE_SRUN)
        write_tool(bin_dir, "scontrol", "#!/bin/sh\necho node1\n")
        return {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "77",
            "SLURM_JOB_NODELIST": "node1",
            "SLURM_ARRAY_JOB_ID": "77",
            "SLURM_ARRAY_TASK_ID": "0",
        }

    def scheduler(self, tmp: Path, monkeypatch):
        bin_dir = tmp / "scheduler_bin"
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        monkeypatch.setattr(SlurmBackend, "retry_delays", (0.0, 0.0, 0.0))
        log = _fake_slurm(bin_dir)
        submissions = lambda: [line.split()[1:] for line in _calls(log, "sbatch")]  # noqa: E731
        cancels = lambda: [line.split()[1:] for line in _calls(log, "scancel")]  # noqa: E731
        return submissions, cancels

    def waits_given(self, argv: list[str]) -> tuple[Wait, ...]:
        words = [word.split("=", 1)[1] for word in argv if word.startswith("--dependency=")]
        waits = []
        for item in ",".join(words).split(",") if words else []:
            kind, *job_ids = item.split(":")
            waits.append(Wait(SLURM_TYPES[kind], tuple(job_ids)))
        return tuple(waits)

    def time_limit_of(self, text: str) -> timedelta | None:
        return timedelta(seconds=SlurmTime.parse(_sbatch_value(text, "time"), "--time").seconds)

    def array_of(self, text: str, argv) -> tuple[tuple[int, ...], int | None] | None:
        items, _, limit = _sbatch_value(text, "array").partition("%")
        return tuple(parse_file_numbers(items)), int(limit) if limit else None
