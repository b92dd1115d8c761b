"""Submission against scripted stand-ins for sbatch/squeue/scancel: job ids, retries, tags adopted instead of
submitted twice, and the all-or-nothing rollback whatever stops a submission (a failed sbatch, Ctrl-C, SIGTERM,
a failed write, any exception, a second Ctrl-C during the rollback)."""

import errno
import json
import os
import re
import signal
from pathlib import Path

import pytest

from nemo_launcher.launch.backends import slurm
from nemo_launcher.launch.backends.slurm import SlurmBackend
from nemo_launcher.launch.errors import SubmissionError
from nemo_launcher.launch.interrupts import SIGNALS
from nemo_launcher.launch.ledger import Ledger

from .conftest import compose_config, plan_rows

# Four stages, each one job; no input files exist here, so their check is off.
FOUR_STAGES = ["stages=[training,conversion,evaluation,export]", "training=gpt3/tiny", "++check_inputs=false"]
QUEUE_AND_PRINT = 'queue "$((500 + n))"; echo "$((500 + n))"'


def _fake_slurm(bin_dir: Path, sbatch_body: str = QUEUE_AND_PRINT, scancel_body: str = "") -> Path:
    """Stand-ins that append `<command> <args>` to calls.log. sbatch runs `sbatch_body` (sh) with $n = its call
    count and `queue ID`, which lists ID with this call's --comment in what squeue prints; scancel runs
    `scancel_body`. Returns calls.log."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    log, queue = bin_dir / "calls.log", bin_dir / "queue.txt"
    log.touch()
    record = f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n'
    bodies = {
        "sbatch": (
            f'n=$(grep -c "^sbatch " "{log}")\n'
            'comment=""; for word in "$@"; do case "$word" in --comment=*) comment="${word#--comment=}";; esac; done\n'
            f'queue() {{ echo "$1|$comment" >> "{queue}"; }}\n{sbatch_body}\n'
        ),
        "squeue": f'cat "{queue}" 2>/dev/null; true\n',
        "scancel": f"{scancel_body}\n",
        "srun": "echo 'usage: srun [--container-image=...]'\n",
    }
    for name, body in bodies.items():
        (bin_dir / name).write_text(record + body)
        (bin_dir / name).chmod(0o755)
    return log


def _calls(log: Path, name: str):
    return [line for line in log.read_text().splitlines() if line.startswith(f"{name} ")]


# The live-run check asks once, before the first sbatch, which of the user's jobs run in this run's directories.
GUARD_CALL = "squeue --me --noheader --format=%F|%T|%Z|%j|%k"


def _look_ups(log: Path):
    """The squeue calls that look a submission's tags up (not the live-run check's)."""
    return [line for line in _calls(log, "squeue") if line != GUARD_CALL]


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(SlurmBackend, "retry_delays", (0.0, 0.0, 0.0))
    return bin_dir


@pytest.fixture
def handlers_restored():
    """The test's submission must leave the signals it handles as they were before it."""
    before = {number: signal.getsignal(number) for number in SIGNALS}
    yield
    assert {number: signal.getsignal(number) for number in before} == before


def _record(results: Path) -> dict:
    (path,) = (results / ".ledger").glob("*.json")
    return json.loads(path.read_text())


def test_job_ids_are_parsed_and_recorded(fake_path, launch, tmp_path):
    log = _fake_slurm(fake_path, 'echo "$((1000 + n))"')
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False, results=results)
    assert code == 0, err
    assert "1001" in out and "singleton" in out
    assert "Submitted batch job 1001" in (results / "gpt3_5b" / "launcher.log").read_text()
    (call,) = _calls(log, "sbatch")
    record = _record(results)
    # The tag rides on the command line, so the script stays byte-identical to its dry run.
    assert call.startswith(f"sbatch --parsable --comment=nemo-launcher:{record['id']}:0 ")
    assert "nemo-launcher:" not in (results / "gpt3_5b" / "nemo-megatron-gpt3_5b_submission.sh").read_text()
    assert _calls(log, "squeue") == [GUARD_CALL]  # a clean submission asks nothing more


def test_a_users_own_comment_is_kept_in_front_of_the_tag(fake_path, launch, tmp_path):
    log = _fake_slurm(fake_path)
    code, out, err = launch(
        ["stages=[training]", "training=gpt3/tiny", "++check_inputs=false", "+cluster.comment=my project"], debug=False
    )
    assert code == 0, err
    assert re.search(r"--comment=my project nemo-launcher:\S+:0 ", _calls(log, "sbatch")[0])


def test_transient_failure_is_looked_up_then_retried(fake_path, launch):
    log = _fake_slurm(
        fake_path,
        'if [ "$n" -lt 3 ]; then echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1; fi; '
        + QUEUE_AND_PRINT,
    )
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 0, err
    sbatch = _calls(log, "sbatch")
    assert len(sbatch) == 3 and len(set(sbatch)) == 1  # the same call, the same tag, each time
    assert len(_look_ups(log)) == 2  # one look-up before each retry: the job was not queued
    assert "retrying" in err and plan_rows(out)[0][2] == "503"


def test_job_queued_despite_a_socket_timeout_is_adopted(fake_path, launch, tmp_path):
    # The controller queued the job, then sbatch lost the answer: a retry would queue a second copy.
    log = _fake_slurm(fake_path, 'queue 700; echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1')
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False, results=results)
    assert code == 0, err
    assert len(_calls(log, "sbatch")) == 1 and len(_look_ups(log)) == 1
    assert plan_rows(out)[0][2] == "700"
    assert "did queue job 700" in err
    assert [job["job_id"] for job in _record(results)["jobs"]] == ["700"]
    assert "Submitted batch job 700 (adopted" in (results / "gpt3_5b" / "launcher.log").read_text()


def test_unparseable_output_adopts_a_queued_job(fake_path, launch):
    log = _fake_slurm(fake_path, 'queue 701; echo "hello"')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 0, err
    assert plan_rows(out)[0][2] == "701" and len(_calls(log, "sbatch")) == 1


def test_unparseable_output_without_a_job_is_an_error(fake_path, launch):
    log = _fake_slurm(fake_path, 'echo "hello"')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 3 and "no job id" in err and "squeue lists no job tagged nemo-launcher:" in err
    assert len(_calls(log, "sbatch")) == 1


def test_failed_look_up_is_never_followed_by_a_second_sbatch(fake_path, launch):
    log = _fake_slurm(fake_path, 'queue 702; echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1')
    # The controller answers the live-run check, then stops answering.
    (fake_path / "squeue").write_text(
        '#!/bin/sh\ncase "$*" in *--states=all*) echo "squeue: error: slurm_load_jobs error: Socket timed out" >&2; '
        "exit 1;; esac\n"
    )
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 3, err
    assert len(_calls(log, "sbatch")) == 1
    assert "cannot tell whether sbatch queued the job" in err and "so it is not submitted again" in err


def test_permanent_failure_is_not_retried(fake_path, launch):
    log = _fake_slurm(fake_path, 'echo "sbatch: error: invalid partition specified: nosuch" >&2; exit 1')
    code, out, err = launch(["stages=[training]", "training=gpt3/5b"], debug=False)
    assert code == 3 and "invalid partition" in err and "'training'" in err and "nothing had been queued" in err
    assert len(_calls(log, "sbatch")) == 1 and not _look_ups(log)


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


def test_dry_run_works_without_slurm(monkeypatch, tmp_path, capsys, handlers_restored):
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
        assert header.split() == [
            "stage",
            "job",
            "id",
            "dependency",
            "nodes",
            "gpus/node",
            "time",
            "array",
            "script",
            "log",
        ]
        assert row.split()[:4] == ["training", "nemo-megatron-gpt3_5b", "DRYRUN-1", "singleton"]
        assert (tmp_path / f"r{word}" / "gpt3_5b" / "nemo-megatron-gpt3_5b_submission.sh").exists()


def test_failed_submission_cancels_what_was_submitted(fake_path, tmp_path, handlers_restored):
    from nemo_launcher.launch.pipeline import Plan, build_plan, submit_plan, write_plan

    log = _fake_slurm(
        fake_path,
        'if [ "$n" -ge 3 ]; then echo "sbatch: error: Batch job submission failed" >&2; exit 1; fi; ' + QUEUE_AND_PRINT,
    )
    cfg, choices = compose_config(
        ["stages=[training]", "training=gpt3/tiny", "++check_inputs=false", f"base_results_dir={tmp_path}/r"]
    )
    plan = build_plan(cfg, choices)
    three_stages = Plan(plan.context, plan.backend, plan.jobs_by_stage * 3)
    write_plan(three_stages, ["main.py"])
    with pytest.raises(
        SubmissionError,
        match=r"\(while submitting job 3 of 3 \(training\)\); rolled back; "
        r"cancelled the jobs already submitted \(training, training\): 501, 502$",
    ):
        submit_plan(three_stages)
    calls = _calls(log, "sbatch")
    assert re.match(r"sbatch --parsable --comment=nemo-launcher:\S+:1 --dependency=afterok:501,singleton ", calls[1])
    assert _calls(log, "scancel") == ["scancel 501 502"]


# ---- whatever stops a submission rolls it back --------------------------------------------------------------


def _rolled_back(log: Path, results: Path, ids):
    """One scancel of exactly `ids`, a ledger record closed as rolled_back naming them."""
    assert _calls(log, "scancel") == [f"scancel {' '.join(ids)}"]
    record = _record(results)
    assert record["state"] == "rolled_back"
    assert [job["job_id"] for job in record["jobs"]][: len(ids)] == list(ids)
    assert all(job["job_id"] is None for job in record["jobs"][len(ids) :])


@pytest.mark.parametrize("name", ["INT", "TERM", "HUP", "QUIT"])
def test_signal_after_the_second_of_four_submissions(fake_path, launch, tmp_path, handlers_restored, name):
    # The second sbatch queues its job, signals the launcher (the pytest process), then prints the id.
    log = _fake_slurm(
        fake_path,
        f'queue "$((500 + n))"; if [ "$n" -eq 2 ]; then kill -{name} $PPID; sleep 0.2; fi; echo "$((500 + n))"',
    )
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3, err
    (line,) = err.strip().splitlines()[-1:]
    interrupt = {"INT": "SIGINT (Ctrl-C)", "HUP": "SIGHUP (the terminal closed)", "QUIT": "SIGQUIT (Ctrl-\\)"}.get(
        name, f"SIG{name}"
    )
    assert line.startswith(
        f"Error: interrupted by {interrupt} while submitting job 2 of 4 (conversion); rolled back; ledger record "
    )
    assert line.endswith("closed as rolled_back; cancelled the jobs already submitted (training, conversion): 501, 502")
    assert len(_calls(log, "sbatch")) == 2
    _rolled_back(log, results, ["501", "502"])


def test_keyboard_interrupt_before_the_pipeline_heard_of_the_job(
    fake_path, launch, tmp_path, monkeypatch, handlers_restored
):
    # Raised after the 2nd sbatch returned, before the pipeline recorded its id: the backend still knows it.
    real, raised = Ledger.submitted, []

    def interrupted_on_second(self, index, *args, **kwargs):
        if index == 1 and not raised:
            raised.append(index)
            raise KeyboardInterrupt
        return real(self, index, *args, **kwargs)

    monkeypatch.setattr(Ledger, "submitted", interrupted_on_second)
    log = _fake_slurm(fake_path)
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3 and "interrupted by SIGINT (Ctrl-C)" in err
    _rolled_back(log, results, ["501", "502"])


def test_write_error_after_a_submission(fake_path, launch, tmp_path, monkeypatch, handlers_restored):
    # launcher.log of the second job cannot be written (the disk filled up): its job is queued all the same.
    real = slurm.append_text

    def full_disk_on_second(path, text):
        if path.parent.name == "convert_nemo":
            raise_full(path)
        real(path, text)

    def raise_full(path):
        from nemo_launcher.launch.writes import writing

        with writing(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(slurm, "append_text", full_disk_on_second)
    log = _fake_slurm(fake_path)
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3, err
    assert f"cannot write {results}/gpt3_tiny/convert_nemo/launcher.log: No space left on device" in err
    _rolled_back(log, results, ["501", "502"])


def test_any_exception_rolls_back(fake_path, launch, tmp_path, monkeypatch, handlers_restored):
    real, raised = Ledger.submitted, []

    def broken_on_third(self, index, *args, **kwargs):
        if index == 2 and not raised:
            raised.append(index)
            raise RuntimeError("boom")
        return real(self, index, *args, **kwargs)

    monkeypatch.setattr(Ledger, "submitted", broken_on_third)
    log = _fake_slurm(fake_path)
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3 and "unexpected RuntimeError: boom" in err
    _rolled_back(log, results, ["501", "502", "503"])


def test_second_interrupt_during_the_rollback_does_not_abandon_it(fake_path, launch, tmp_path, handlers_restored):
    # Ctrl-C after the 2nd submission, and again (SIGTERM, then SIGINT) while scancel runs.
    log = _fake_slurm(
        fake_path,
        'queue "$((500 + n))"; if [ "$n" -eq 2 ]; then kill -INT $PPID; sleep 0.2; fi; echo "$((500 + n))"',
        scancel_body="kill -TERM $PPID; sleep 0.2; kill -INT $PPID; sleep 0.2",
    )
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3, err
    assert "SIGTERM received: rolling back first" in err
    assert "SIGTERM during the rollback was deferred until it finished" in err
    _rolled_back(log, results, ["501", "502"])


def test_interrupted_sbatch_whose_answer_is_lost_is_found_by_its_tag(
    fake_path, launch, tmp_path, monkeypatch, handlers_restored
):
    # The 3rd sbatch queues its job and is interrupted before it answers; it does not finish within the grace.
    monkeypatch.setattr(SlurmBackend, "finish_grace_s", 0.5)
    log = _fake_slurm(
        fake_path, 'queue "$((500 + n))"; if [ "$n" -eq 3 ]; then kill -INT $PPID; sleep 30; fi; echo "$((500 + n))"'
    )
    results = tmp_path / "results"
    code, out, err = launch(FOUR_STAGES, debug=False, results=results)
    assert code == 3, err
    assert len(_look_ups(log)) == 1
    _rolled_back(log, results, ["501", "502", "503"])
