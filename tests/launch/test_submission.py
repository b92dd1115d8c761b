"""Submission against a scripted stand-in for sbatch/scancel: job ids, retries, atomic rollback, preflight errors."""
import os
from pathlib import Path

import pytest

from nemo_launcher.launch.backends.slurm import SlurmBackend
from nemo_launcher.launch.errors import SubmissionError

from .conftest import compose_config


def _fake_slurm(bin_dir: Path, sbatch_body: str) -> Path:
    """sbatch runs `sbatch_body` (sh) with a call counter; scancel records its arguments."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    log = bin_dir / "calls.log"
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\n"
        f'echo "sbatch $*" >> "{log}"\n'
        f'n=$(grep -c "^sbatch" "{log}")\n'
        f"{sbatch_body}\n"
    )
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "scancel $*" >> "{log}"\n')
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'usage: srun [--container-image=...]'\n")
    for name in ("sbatch", "scancel", "srun"):
        (bin_dir / name).chmod(0o755)
    return log


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(SlurmBackend, "retry_delays", (0.0, 0.0, 0.0))
    return bin_dir


def test_job_ids_are_parsed_and_recorded(fake_path, launch, tmp_path):
    log = _fake_slurm(fake_path, 'echo "$((1000 + n))"')
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False, results=results)
    assert code == 0, err
    assert "1001" in out and "singleton" in out
    assert "Submitted batch job 1001" in (results / "gpt3_5b" / "launcher.log").read_text()
    assert log.read_text().startswith("sbatch --parsable ")


def test_transient_failure_is_retried(fake_path, launch):
    log = _fake_slurm(fake_path, 'if [ "$n" -lt 3 ]; then echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1; fi; echo 77')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 0, err
    assert log.read_text().count("sbatch ") == 3
    assert "retrying" in err


def test_permanent_failure_is_not_retried(fake_path, launch):
    log = _fake_slurm(fake_path, 'echo "sbatch: error: invalid partition specified: nosuch" >&2; exit 1')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 3 and "invalid partition" in err and "'training'" in err
    assert log.read_text().count("sbatch ") == 1


def test_unparseable_output_is_an_error(fake_path, launch):
    _fake_slurm(fake_path, 'echo "hello"')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 3 and "no job id" in err


def test_missing_sbatch_suggests_dry_run(monkeypatch, launch, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 1 and "sbatch" in err and "NEMO_LAUNCHER_DEBUG=1" in err and "cluster_type=interactive" in err


def test_container_without_pyxis_is_caught(fake_path, launch):
    _fake_slurm(fake_path, "echo 5")
    (fake_path / "srun").write_text("#!/bin/sh\necho 'usage: srun [--mpi=type]'\n")
    code, out, err = launch(["stages=[training]", "training=gpt3/5b", "container=img:1"], debug=False)
    assert code == 1 and "pyxis" in err and "container=null" in err


def test_dry_run_works_without_slurm(monkeypatch, tmp_path, capsys):
    from nemo_launcher.launch.app import run

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for word in ("1", "true", "True"):
        monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", word)
        cfg, choices = compose_config(["stages=[training]", "training=gpt3/5b", f"base_results_dir={tmp_path}/r{word}"])
        assert run(cfg, choices, ["main.py"]) == 0
        out = capsys.readouterr().out
        header, row = out.splitlines()[1:3]
        assert header.split() == ["stage", "job", "id", "dependency", "nodes", "gpus/node", "time", "array", "script", "log"]
        assert row.split()[:4] == ["training", "nemo-megatron-gpt3_5b", "DRYRUN-1", "singleton"]
        assert (tmp_path / f"r{word}" / "gpt3_5b" / "nemo-megatron-gpt3_5b_submission.sh").exists()


def test_failed_submission_cancels_what_was_submitted(fake_path, tmp_path):
    from nemo_launcher.launch.pipeline import Plan, build_plan, submit_plan, write_plan

    log = _fake_slurm(fake_path, 'if [ "$n" -ge 3 ]; then echo "sbatch: error: Batch job submission failed" >&2; exit 1; fi; echo "$((500 + n))"')
    cfg, choices = compose_config(["stages=[training]", "training=gpt3/tiny", f"base_results_dir={tmp_path}/r"])
    plan = build_plan(cfg, choices)
    three_stages = Plan(plan.context, plan.backend, plan.jobs_by_stage * 3)
    write_plan(three_stages, ["main.py"])
    with pytest.raises(SubmissionError, match="cancelled the jobs already submitted: 501, 502"):
        submit_plan(three_stages)
    calls = log.read_text().splitlines()
    assert calls[1].startswith("sbatch --parsable --dependency=afterok:501,singleton ")
    assert calls[-1] == "scancel 501 502"
