"""Submissions on a real Slurm: a run with live jobs is refused, the files its jobs read are never rewritten (not
by a dry run, not by a refused or an explicit resubmission), and a 2-point sweep gives two pipelines that share
no file."""

import os
import subprocess
import sys
from pathlib import Path

from nemo_launcher.launch.resolvers import REPO_ROOT

from .conftest import plan_rows
from .test_training_on_slurm import SLURM_CPU

# The job is queued for an hour from now: it stays PENDING, a live job that never starts during the test.
HELD = ["stages=[training]", "training=gpt3/tiny", "+cluster.begin=now+3600", *SLURM_CPU]


def _snapshot(directory: Path):
    """(bytes, inode, mtime) of every file a job reads: its resolved config and its script."""
    return {
        p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
        if p.suffix in (".yaml", ".sh")
    }


def test_live_run_is_refused_and_its_files_are_never_rewritten(slurm_cluster, launch, tmp_path):
    results = tmp_path / "results"
    run_dir = results / "gpt3_tiny"
    code, out, err = launch(HELD, debug=False, results=results)
    assert code == 0, err
    first = plan_rows(out)[0][2]
    queued = [first]
    try:
        assert slurm_cluster.job_state(first) == "PENDING"
        before = _snapshot(run_dir)
        assert set(before) == {"gpt3_tiny_hydra.yaml", "nemo-megatron-gpt3_tiny_submission.sh"}

        # A dry run with another config leaves the submitted run alone and writes a mirror instead.
        code, out, err = launch(HELD + ["training.trainer.max_steps=41"], debug=True, results=results)
        assert code == 0, err
        assert "belong to a submitted run" in out
        (mirror,) = (results / ".dryrun").glob("*/gpt3_tiny/gpt3_tiny_hydra.yaml")
        assert "max_steps: 41" in mirror.read_text()
        assert _snapshot(run_dir) == before

        # The same command again: refused, naming the live job; nothing written.
        code, out, err = launch(HELD, debug=False, results=results)
        assert code == 5, (out, err)
        assert first in err and "still queued or running" in err and "resubmit_while_running=true" in err
        assert _snapshot(run_dir) == before

        # Asked for explicitly, but the config the queued job will read would change: still refused.
        code, out, err = launch(
            HELD + ["resubmit_while_running=true", "training.trainer.max_steps=41"], debug=False, results=results
        )
        assert code == 5 and "would change it" in err, (out, err)
        assert _snapshot(run_dir) == before

        # Asked for explicitly with identical files: a second job is queued, the files are not even rewritten.
        code, out, err = launch(HELD + ["resubmit_while_running=true"], debug=False, results=results)
        assert code == 0, err
        second = plan_rows(out)[0][2]
        queued.append(second)
        assert second != first and slurm_cluster.job_state(second) == "PENDING"
        assert _snapshot(run_dir) == before
    finally:
        subprocess.run(["scancel", *queued], check=False)
    for job in queued:
        assert slurm_cluster.wait(job, timeout_s=60) == "CANCELLED"

    # Nothing of the run is live any more: a changed config may be submitted (the ledger keeps the old hashes).
    code, out, err = launch(HELD + ["training.trainer.max_steps=41"], debug=False, results=results)
    assert code == 0, err
    third = plan_rows(out)[0][2]
    subprocess.run(["scancel", third], check=False)
    assert "max_steps: 41" in (run_dir / "gpt3_tiny_hydra.yaml").read_text()


def _files(root: Path):
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_two_point_sweep_gives_two_pipelines_sharing_no_file(slurm_cluster, tmp_path, tiny_pile_data):
    data, results = tiny_pile_data, tmp_path / "results"
    data_before = _files(data)
    argv = [
        sys.executable,
        "main.py",
        "-m",
        "stages=[training,conversion]",
        "training=gpt3/tiny",
        "training.model.micro_batch_size=2,4",
        "training.trainer.max_steps=6",
        "training.exp_manager.checkpoint_callback_params.every_n_train_steps=3",
        f"data_dir={data}",
        f"base_results_dir={results}",
        *SLURM_CPU,
    ]
    result = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "NEMO_LAUNCHER_DEBUG"},
    )
    assert result.returncode == 0, result.stderr
    tables = result.stdout.split("Pipeline, ")[1:]
    assert len(tables) == 2
    ids = [[row[2] for row in plan_rows("Pipeline, " + table)] for table in tables]
    assert len({job for point in ids for job in point}) == 4
    for point in ids:
        assert [slurm_cluster.wait(job, timeout_s=600) for job in point] == ["COMPLETED", "COMPLETED"]
    runs = {name: results / name for name in ("gpt3_tiny-micro_batch_size_2", "gpt3_tiny-micro_batch_size_4")}
    written = {name: set(_files(run)) for name, run in runs.items()}
    for name, run in runs.items():
        assert (run / "convert_nemo" / "results" / "megatron_gpt.nemo").is_file(), name
        assert (run / "results" / "checkpoints" / "step-6").is_dir(), name
    one, two = written.values()
    assert not one & two
    others = {p for p in _files(results) if not any(run in p.parents for run in runs.values())}
    assert all({".ledger", "multirun"} & set(p.relative_to(results).parts) for p in others), others
    assert _files(data) == data_before, "a sweep point wrote into the shared data directory"
