"""Submission faults on a real Slurm, with the launcher run as a program (`python3 main.py ...`) and an `sbatch`
wrapper first on PATH that calls the real sbatch and then misbehaves:

- it reports "Socket timed out" after the job was queued: the launcher adopts the job, one job per stage;
- it sends SIGINT to the launcher after its 2nd of 4 calls: nothing stays queued;
- it fills the file system of base_results_dir after the 1st: launcher.log cannot be written, the real job is
  cancelled.

Jobs are held for an hour (`--begin=now+3600`), so none of them runs; each test cancels what it queued.
"""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT

from .conftest import plan_rows
from .test_storage_faults import _tmpfs
from .test_training_on_slurm import SLURM_CPU

# Every job is held (--begin=now+3600) and none takes a node: this module runs beside the other Slurm tests
# (tests/conftest.py).
HELD_JOBS_ONLY = True
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"}


@pytest.fixture
def pipeline(slurm_cluster, tmp_path):
    """(run the launcher with an sbatch wrapper, the job names of the run). Cancels every job of those names
    afterwards, whatever the test did."""
    run_name = f"faults_{uuid.uuid4().hex[:8]}"
    names = [f"nemo-megatron-{prefix}{run_name}" for prefix in ("", "convert_", "eval_all_", "export_")]
    real = shutil.which("sbatch")

    def launch(wrapper_body: str, results: Path):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "sbatch").write_text(
            "#!/usr/bin/env bash\n"
            f'echo "$*" >> "{bin_dir}/calls"\n'
            f'n=$(wc -l < "{bin_dir}/calls")\n'
            f"REAL={real}\n{wrapper_body}\n"
        )
        (bin_dir / "sbatch").chmod(0o755)
        argv = [
            sys.executable,
            "main.py",
            "stages=[training,conversion,evaluation,export]",
            "training=gpt3/tiny",
            f"training.run.name={run_name}",
            "++check_inputs=false",
            "+cluster.begin=now+3600",
            f"base_results_dir={results}",
            *SLURM_CPU,
        ]
        env = {k: v for k, v in os.environ.items() if k != "NEMO_LAUNCHER_DEBUG"}
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)

    yield launch, names
    leftovers = [job_id for name in names for job_id, _ in _jobs_named(name)]
    if leftovers:
        subprocess.run(["scancel", *leftovers], check=False)


def _jobs_named(name: str):
    """(id, state) of this user's jobs called `name`, ended ones the controller remembers included."""
    out = subprocess.run(
        ["squeue", "--me", "-h", "-t", "all", "-n", name, "-o", "%i|%T"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [tuple(line.split("|")) for line in out.split()]


def test_socket_timeout_after_queueing_leaves_one_job_per_stage(pipeline, tmp_path):
    launch, names = pipeline
    result = launch(
        '"$REAL" "$@" >/dev/null || exit\necho "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1',
        tmp_path / "results",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("keeping that job instead of submitting a second copy") == 4
    planned = {row[1]: row[2] for row in plan_rows(result.stdout)}
    assert sorted(planned) == sorted(names)
    for name in names:
        assert _jobs_named(name) == [(planned[name], "PENDING")], name
    assert len((tmp_path / "bin" / "calls").read_text().splitlines()) == 4  # never a second sbatch


def test_sigint_after_the_second_of_four_sbatch_calls_leaves_nothing_queued(pipeline, tmp_path):
    launch, names = pipeline
    result = launch(
        'out=$("$REAL" "$@"); status=$?\n'
        'if [ "$n" -eq 2 ]; then kill -INT "$PPID"; sleep 0.5; fi\n'
        'echo "$out"; exit "$status"',
        tmp_path / "results",
    )
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "Error: interrupted by SIGINT (Ctrl-C) while submitting job 2 of 4 (conversion); rolled back"
    )
    cancelled = line.rsplit(": ", 1)[1].split(", ")
    assert len(cancelled) == 2
    found = {job_id: state for name in names for job_id, state in _jobs_named(name)}
    assert sorted(found) == sorted(cancelled)
    assert not {state for state in found.values()} & LIVE, found


def test_disk_full_after_a_real_sbatch_rolls_back(pipeline, tmp_path):
    launch, names = pipeline
    with _tmpfs(tmp_path / "small", "size=256k") as small:
        result = launch(
            '"$REAL" "$@"; status=$?\n'
            f'if [ "$n" -eq 1 ]; then dd if=/dev/zero of="{small}/filler" bs=4096 2>/dev/null; fi\n'
            'exit "$status"',
            small / "results",
        )
        assert result.returncode == 3, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith(f"Error: cannot write {small}/results/") and "No space left on device" in line
        (job_id,) = line.rsplit(": ", 1)[1].split(", ")
    assert _jobs_named(names[0]) == [(job_id, "CANCELLED")]
    assert all(not _jobs_named(name) for name in names[1:])
