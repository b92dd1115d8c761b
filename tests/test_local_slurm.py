"""The test cluster itself: what .ci/local_slurm/start.sh promises the other Slurm tests.

sudo .ci/local_slurm/start.sh && python3 -m pytest -q tests/test_local_slurm.py
"""

import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import require_project_cluster

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")


def _sbatch(tmp_path, body: str, *flags: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -euo pipefail\n" + textwrap.dedent(body))
    return subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/out-%j.txt", *flags, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_two_node_job_with_gpus_and_pyxis_flags_runs(slurm_cluster, tmp_path):
    require_project_cluster(slurm_cluster, nodes=2, gpus_per_node=8, pyxis=True)
    # The launcher's training scripts look like this: whole nodes, 8 tasks and 8 GPUs each, pyxis flags.
    submitted = _sbatch(
        tmp_path,
        """
        srun --container-image=nvcr.io/nvidia/nemo:24.01 --container-mounts=/data:/data --no-container-mount-home \\
            bash -c 'echo "$SLURMD_NODENAME $SLURM_PROCID $CUDA_VISIBLE_DEVICES $FAKE_PYXIS_CONTAINER_IMAGE"'
        """,
        "--nodes=2",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--exclusive",
        "--mem=0",
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert slurm_cluster.wait(job_id) == "COMPLETED"
    lines = (tmp_path / f"out-{job_id}.txt").read_text().splitlines()
    assert len(lines) == 16
    assert {line.split()[0] for line in lines} == set(slurm_cluster.nodes[:2])
    assert sorted(int(line.split()[1]) for line in lines) == list(range(16))
    assert {line.split()[2] for line in lines} == {"0,1,2,3,4,5,6,7"}
    assert {line.split()[3] for line in lines} == {"nvcr.io/nvidia/nemo:24.01"}


def test_impossible_request_is_rejected_at_submit_time(slurm_cluster, tmp_path):
    # EnforcePartLimits=ALL: a job that can never run fails now instead of pending forever.
    submitted = _sbatch(tmp_path, "true\n", f"--nodes={len(slurm_cluster.nodes) + 1}")
    assert submitted.returncode != 0
    assert "Node count specification invalid" in submitted.stderr


@pytest.mark.parametrize("required", [False, True])
def test_missing_slurm_skips_or_fails(tmp_path, required):
    # Runs the fixture in a child pytest whose PATH has no Slurm tools; CI must fail, a laptop skips.
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_uses_slurm.py").write_text("def test_it(slurm_cluster):\n    pass\n")
    env = {
        "PATH": str(tmp_path / "empty"),
        "NEMO_LAUNCHER_TEST_SLURM": "required" if required else "",
        "PYTHONPATH": str(CONFTEST.parent.parent),
    }  # the copied conftest imports the project
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    if required:
        assert result.returncode == 1, result.stdout
        assert "1 error" in result.stdout
        assert "NEMO_LAUNCHER_TEST_SLURM=required" in result.stdout
    else:
        assert result.returncode == 0, result.stdout
        assert "1 skipped" in result.stdout
    assert "`sbatch` is not on PATH" in result.stdout
