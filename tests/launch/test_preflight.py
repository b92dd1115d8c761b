"""Preflight checks against the real local Slurm (`sudo .ci/local_slurm/start.sh`).

Failures are made with config overrides, or with PATH shims that wrap the real Slurm commands
(a `srun` whose --help hides pyxis, an `scontrol`/`sacctmgr` pair that reports accounting).
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_launcher.launch import preflight
from tests.conftest import LOCAL_SLURM_SETUP, skip_or_fail

REPO = Path(__file__).resolve().parents[2]
# Other test runs may share the local cluster; their jobs end within a few minutes, so waiting this long for
# the whole cluster succeeds unless something is stuck (60 s was too short on a busy 2-core machine).
OCCUPY_TIMEOUT_S = 300


@pytest.fixture
def run(slurm_cluster, tmp_path, capsys):
    """Runs `python3 -m nemo_launcher.launch.preflight <overrides>` in-process; returns (exit code, lines by check
    name)."""

    def _run(*overrides):
        code = preflight.main([f"base_results_dir={tmp_path / 'results'}", f"data_dir={tmp_path / 'data'}", *overrides])
        out = capsys.readouterr().out
        lines = {}
        for line in out.splitlines()[:-1]:
            status, rest = line.split(None, 1)
            for name in sorted(lines_names(), key=len, reverse=True):
                if rest.startswith(name):
                    lines[name] = (status, rest[len(name) :].strip())
                    break
        return code, lines, out

    return _run


def lines_names():
    return (
        "slurm version",
        "slurm controller",
        "partition",
        "account",
        "container (pyxis)",
        "mpi plugins",
        "gpus per node",
        "base_results_dir writable",
        "data_dir writable",
        "base_results_dir free space",
    )


def _shim(bin_dir: Path, name: str, body: str) -> None:
    """A wrapper named `name` in bin_dir; REAL is the real command it wraps."""
    bin_dir.mkdir(exist_ok=True)
    real = shutil.which(name)
    (bin_dir / name).write_text(f"#!/usr/bin/env bash\nREAL={real}\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_passes_on_the_local_cluster(run, slurm_cluster, tmp_path):
    code, lines, out = run(
        f"cluster.partition={slurm_cluster.partition}",
        "container=nvcr.io/nvidia/nemo:24.01",
        f"cluster.gpus_per_node={slurm_cluster.gpus_per_node or 'null'}",
    )
    assert code == 0, out
    assert all(status == "PASS" for status, _ in lines.values()), out
    assert len(lines) == 10, out
    assert (
        lines["slurm version"][1] == f"slurm-wlm {slurm_cluster.version}"
        or slurm_cluster.version in lines["slurm version"][1]
    )
    assert "pmix" in lines["mpi plugins"][1]
    assert (
        f"base_results_dir={tmp_path / 'results'} is writable from a compute node"
        in lines["base_results_dir writable"][1]
    )
    assert out.rstrip().endswith("all 10 checks passed")
    assert re.fullmatch(
        r"[0-9.]+ [KMGT]iB free in \S+, 5\.0 GiB needed \(no checkpoint of this run yet: the launcher's floor\)",
        lines["base_results_dir free space"][1],
    ), out
    # The test job cleaned up after itself.
    assert not list((tmp_path / "results").glob(".nemo-launcher-preflight-*"))


def test_nonexistent_partition(run, slurm_cluster):
    code, lines, out = run("cluster.partition=no_such_partition")
    assert code == 1
    status, text = lines["partition"]
    assert status == "FAIL"
    assert text == (
        "cluster.partition='no_such_partition' does not exist. "
        f"Fix: set cluster.partition to one of: {slurm_cluster.partition}"
    )
    assert lines["gpus per node"] == ("SKIP", "not checked: fix the partition or account above first")
    assert lines["base_results_dir writable"][0] == lines["data_dir writable"][0] == "SKIP"
    assert out.rstrip().endswith("1 of 10 checks failed, 3 skipped")


def test_container_without_pyxis(run, slurm_cluster, tmp_path, monkeypatch):
    # srun as on a cluster without pyxis: --help has no container options (everything else is the real srun).
    _shim(
        tmp_path / "bin",
        "srun",
        'if [[ " $* " == *" --help "* ]]; then "$REAL" "$@" | grep -v -- "--container"; exit 0; fi\nexec "$REAL" "$@"',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    code, lines, out = run("container=nvcr.io/nvidia/nemo:24.01")
    assert code == 1
    status, text = lines["container (pyxis)"]
    assert status == "FAIL"
    assert (
        "container=nvcr.io/nvidia/nemo:24.01 needs the pyxis plugin, but `srun --help` lists no --container-image"
        in text
    )
    assert "Fix: install pyxis (0.9.1 or newer) and enroot on the cluster, or set container=null" in text

    code, lines, out = run("container=null")  # same cluster, no container: nothing to complain about
    assert code == 0, out


def test_unwritable_results_dir(run, slurm_cluster, tmp_path):
    # A path below a regular file cannot be created, even by root (chmod would not stop root).
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code, lines, out = run(f"base_results_dir={blocker}/results")
    assert code == 1
    status, text = lines["base_results_dir writable"]
    assert status == "FAIL"
    assert text.startswith(f"base_results_dir={blocker}/results is not writable from a compute node (")
    assert "Not a directory" in text
    assert "Fix: set base_results_dir to a shared folder that you may write and every node mounts" in text
    assert lines["data_dir writable"][0] == "PASS"


def test_busy_cluster_skips_the_write_test_and_leaves_no_job(run, slurm_cluster, monkeypatch):
    # Occupy every node, so the test job cannot start within the (shortened) wait.
    blocker = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--exclusive",
            f"--nodes={len(slurm_cluster.nodes)}",
            "--output=/dev/null",
            "--wrap",
            "sleep 120",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    job = blocker.stdout.strip()
    try:
        deadline = time.monotonic() + OCCUPY_TIMEOUT_S
        while slurm_cluster.job_state(job) == "PENDING":
            if time.monotonic() > deadline:
                queue = subprocess.run(["squeue", "-h", "-o", "%i %u %T %j"], capture_output=True, text=True).stdout
                skip_or_fail(
                    f"other jobs kept the cluster busy for {OCCUPY_TIMEOUT_S} s, so the test could not "
                    f"occupy it; squeue: {' | '.join(queue.splitlines())}",
                    "CI's cluster runs only the suite's own short jobs",
                )
            time.sleep(0.5)
        monkeypatch.setenv("NEMO_LAUNCHER_PREFLIGHT_WAIT", "2")
        code, lines, out = run()
        assert code == 0, out
        status, text = lines["base_results_dir writable"]
        assert status == "SKIP" and "no compute node started the test job within 2 s" in text
        queued = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout
        assert "nemo-preflight-" not in queued
    finally:
        subprocess.run(["scancel", job])


def test_gpus_per_node_beyond_the_gres(run, slurm_cluster):
    if not slurm_cluster.gpus_per_node:
        skip_or_fail("the cluster has no GPU GRES", LOCAL_SLURM_SETUP)
    code, lines, _ = run(f"cluster.gpus_per_node={slurm_cluster.gpus_per_node * 2}")
    assert code == 1
    assert lines["gpus per node"][1].endswith(f"Fix: set cluster.gpus_per_node={slurm_cluster.gpus_per_node}")


def test_mpi_plugin_in_srun_args_must_exist(run, slurm_cluster):
    code, lines, _ = run("cluster.srun_args=['--mpi=openmpi_v9']")
    assert code == 1
    assert "cluster.srun_args asks for --mpi=openmpi_v9, but srun offers:" in lines["mpi plugins"][1]


def test_account_with_accounting(run, slurm_cluster, tmp_path, monkeypatch):
    # The local cluster keeps no accounting; shims report slurmdbd and two associations of this user.
    _shim(
        tmp_path / "bin",
        "scontrol",
        'if [[ "$*" == "show config" ]]; then\n'
        '  "$REAL" show config | sed "s|accounting_storage/none|accounting_storage/slurmdbd|"; exit\nfi\n'
        'exec "$REAL" "$@"',
    )
    _shim(tmp_path / "bin", "sacctmgr", 'printf "research\\nacme\\n"')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    code, lines, out = run("cluster.account=acme")
    assert lines["account"][0] == "PASS", out
    code, lines, _ = run("cluster.account=nobody_s_account")
    assert code == 1
    assert lines["account"][1].endswith(
        "Fix: set cluster.account to one of your accounts: acme, research "
        f"(sacctmgr show associations user={preflight.getpass.getuser()})"
    )


def test_account_without_accounting_cannot_be_checked(run, slurm_cluster):
    code, lines, out = run("cluster.account=acme")
    assert code == 0, out
    assert lines["account"][1].startswith("cannot be checked: the cluster keeps no accounting")


def test_no_slurm_on_path(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert preflight.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL  slurm version")
    assert "`sinfo` is not on PATH. Fix: run on the cluster's login node" in out[0]
    assert out[-1] == "1 of 1 checks failed"


def test_bad_override_is_one_line_error(capsys):
    assert preflight.main(["cluster.partition"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "cluster.partition" in err


def test_other_cluster_types_have_nothing_to_check(capsys):
    assert preflight.main(["cluster_type=interactive"]) == 0
    assert "the preflight checks Slurm clusters only" in capsys.readouterr().out


def test_command_line_never_imports_torch(slurm_cluster, tmp_path):
    code = (
        "import sys; from nemo_launcher.launch import preflight; "
        f"rc = preflight.main(['base_results_dir={tmp_path}', 'data_dir={tmp_path}']); "
        "assert 'torch' not in sys.modules, 'preflight imported torch'; sys.exit(rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.launch.preflight", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "python3 -m nemo_launcher.launch.preflight" in help_text.stdout


# ---- free space (no Slurm needed) ----------------------------------------------------------------------------


def _checkpoint(root: Path, step: int, size: int, complete: bool = True) -> Path:
    """A step folder whose one file claims `size` bytes (sparse: the disk holds none of them)."""
    folder = root / f"step-{step}"
    folder.mkdir(parents=True)
    with open(folder / "weights.distcp", "wb") as handle:
        handle.truncate(size)
    if complete:
        (folder / "COMPLETE").write_text("{}")
    return folder


def test_free_space_is_measured_against_the_newest_complete_checkpoint(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    checkpoints = tmp_path / "results" / "run" / "results" / "checkpoints"
    _checkpoint(checkpoints, 10, 2**20)
    newest = _checkpoint(checkpoints, 20, free * 2)  # a next save of this size cannot fit
    _checkpoint(checkpoints, 30, 2**20, complete=False)  # half written: says nothing about the next one
    result = preflight.check_free_space(tmp_path / "results", checkpoints)
    assert not result.ok
    assert f"needed (the size of the newest checkpoint, {newest})" in result.detail
    assert f" free in {tmp_path / 'results'}, " in result.detail
    assert result.line().endswith("Fix: free some space there, or set base_results_dir to a file system with room")


def test_free_space_passes_with_room_for_the_next_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    _checkpoint(checkpoints, 5, 3 * 2**20)
    result = preflight.check_free_space(tmp_path / "not" / "made" / "yet", checkpoints)
    assert result.ok, result.line()
    assert f" free in {tmp_path}, 3.0 MiB needed (the size of the newest checkpoint, " in result.detail


def test_free_space_floor_without_a_checkpoint(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail("mounting a small tmpfs needs root", "CI runs as root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        result = preflight.check_free_space(mount / "results", None)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert not result.ok
    assert (
        result.detail
        == f"1.0 MiB free in {mount}, 5.0 GiB needed (no checkpoint of this run yet: the launcher's floor)"
    )


def test_checkpoint_root_follows_the_training_config():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "base_results_dir": "/r",
            "training": {
                "run": {"name": "x", "results_dir": "${base_results_dir}/${.name}"},
                "exp_manager": {"explicit_log_dir": "${training.run.results_dir}/results"},
            },
        }
    )
    assert preflight.checkpoint_root(cfg) == Path("/r/x/results/checkpoints")
    cfg.training.run.name = "???"
    assert preflight.checkpoint_root(cfg) is None
