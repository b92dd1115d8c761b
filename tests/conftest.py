"""Fixtures shared by the whole test suite.

`slurm_cluster` gives tests a real Slurm to submit to: the project's local cluster
(`sudo .ci/local_slurm/start.sh`: partition `debug`, nodes fakenode1..2, 8 fake GPUs
each, fake pyxis) or any other that `sbatch` reaches. Without one, Slurm tests skip,
unless NEMO_LAUNCHER_TEST_SLURM=required (CI sets it in `.ci/run`), where they fail.
"""
import dataclasses
import os
import shutil
import subprocess
import time

import pytest

# Long enough for a slurmctld busy with another worker's jobs on a 2-core machine.
_SLURM_QUERY_TIMEOUT_S = 20


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    """What the running cluster offers, as read from `sinfo` when the session starts."""

    version: str  # e.g. "22.05.8"
    partition: str  # the default partition (marked `*` by sinfo)
    nodes: tuple  # node names in that partition, e.g. ("fakenode1", "fakenode2")
    gpus_per_node: int  # gres/gpu count of a node; 0 when no GPU GRES is configured
    has_pyxis: bool  # `srun --help` lists --container-image (real or fake pyxis)

    def job_state(self, job_id: str) -> str:
        """State of a job as `scontrol` reports it (PENDING, RUNNING, COMPLETED, FAILED, ...)."""
        out = _run(["scontrol", "show", "job", "-o", str(job_id)])
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        raise AssertionError(f"no JobState in scontrol output for job {job_id}: {out!r}")

    def wait(self, job_id: str, timeout_s: float = 60.0) -> str:
        """Wait until a job has ended and return its final state; fail the test on timeout."""
        ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.job_state(job_id)
            if state in ended:
                return state
            if time.monotonic() > deadline:
                pytest.fail(f"Slurm job {job_id} still {state} after {timeout_s:.0f}s")
            time.sleep(0.2)


def _run(argv) -> str:
    return subprocess.run(
        argv, check=True, capture_output=True, text=True, timeout=_SLURM_QUERY_TIMEOUT_S
    ).stdout


def _probe_slurm() -> SlurmCluster:
    """Raises with the reason when no usable Slurm answers."""
    for tool in ("sbatch", "squeue", "sinfo", "srun", "scontrol"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"`{tool}` is not on PATH")
    _run(["squeue", "-h", "-o", "%i"])  # fails when slurmctld does not answer
    version = _run(["sinfo", "--version"]).split()[-1]
    partitions = _run(["sinfo", "-h", "-o", "%P"]).split()
    default = next((p for p in partitions if p.endswith("*")), partitions[0] if partitions else None)
    if default is None:
        raise RuntimeError("sinfo lists no partition")
    partition = default.rstrip("*")
    nodes = tuple(_run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"]).split())
    gpus = 0
    for gres in _run(["sinfo", "-h", "-p", partition, "-o", "%G"]).split():
        for item in gres.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu" and fields[-1].isdigit():
                gpus = max(gpus, int(fields[-1]))
    has_pyxis = "--container-image" in _run(["srun", "--help"])
    return SlurmCluster(version, partition, nodes, gpus, has_pyxis)


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        cluster = _probe_slurm()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        reason = f"no usable Slurm cluster: {error}"
        if isinstance(error, subprocess.CalledProcessError):
            reason += f" ({(error.stderr or '').strip()})"
        if os.environ.get("NEMO_LAUNCHER_TEST_SLURM", "").lower() == "required":
            pytest.fail(
                f"{reason}. NEMO_LAUNCHER_TEST_SLURM=required; start the local cluster with "
                "`sudo .ci/local_slurm/start.sh` (or unset the variable to skip the Slurm tests).",
                pytrace=False,
            )
        pytest.skip(f"{reason}; start one with `sudo .ci/local_slurm/start.sh`")
    yield cluster
