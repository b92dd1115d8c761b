"""Damaged ledger records (a file cut short, a null job entry, a job id of the wrong type, a missing key): `status`,
`cancel` and a new submission name the file and what is wrong in one warning, never a traceback; the jobs whose
entries can still be read stay visible; on Slurm the live-run guard finds the jobs a damaged record hides by their
tags in squeue."""

import json
import re
from pathlib import Path

import pytest

from nemo_launcher.launch.ledger_damage import read_record

from .test_ledger import _calls, _run
from .test_ledger import fake_slurm as fake_slurm  # noqa: F401 - the fixture, shared with the ledger's tests

THREE_STAGES = ["stages=[training,conversion,evaluation]", "training=gpt3/tiny"]
ALL_LIVE = "printf '1001|RUNNING|0:05|None\\n1002|PENDING|0:00|Dependency\\n1003|PENDING|0:00|Dependency\\n'"


def _cut_in_the_last_job(path: Path) -> None:
    """What a disk that filled up mid-write leaves: the file ends inside the third job's entry."""
    text = path.read_text()
    path.write_text(text[: text.rindex('"job_id": "1003"') - 10])


def _edit(change):
    def damage(path: Path) -> None:
        record = json.loads(path.read_text())
        change(record["jobs"])
        path.write_text(json.dumps(record, indent=1))

    return damage


# damage -> (what the warning says is wrong, the job ids still visible)
DAMAGES = {
    "cut short": (_cut_in_the_last_job, "the JSON breaks off or is malformed at line", ["1001", "1002"]),
    "null job": (_edit(lambda jobs: jobs.__setitem__(1, None)), "jobs[1] is null, not an object", ["1001", "1003"]),
    "job id a number": (
        _edit(lambda jobs: jobs[0].__setitem__("job_id", 1001)),
        "jobs[0].job_id is a number, not text or null",
        ["1002", "1003"],
    ),
    "missing key": (_edit(lambda jobs: jobs[2].pop("stage")), 'jobs[2] has no "stage"', ["1001", "1002"]),
}


def _submit_and_damage(fake_slurm, launch, tmp_path, damage):
    """Three jobs queued as 1001-1003 with a ledger record, then the record damaged: (results, record path, id)."""
    fake_slurm(squeue=ALL_LIVE)
    results = tmp_path / "results"
    code, _, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 0, err
    (path,) = (results / ".ledger").glob("*.json")
    damage(path)
    return results, path, path.stem


def _one_warning(err: str, path: Path, problem: str) -> None:
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1, err
    assert f"ledger record {path} is damaged (" in warnings[0] and problem in warnings[0]
    assert "then repair or remove the file" in warnings[0]


@pytest.mark.parametrize("kind", DAMAGES)
def test_status_shows_the_jobs_still_readable(kind, fake_slurm, launch, tmp_path, capsys):
    damage, problem, visible = DAMAGES[kind]
    results, path, pipeline_id = _submit_and_damage(fake_slurm, launch, tmp_path, damage)

    code, out, err = _run(capsys, "status", pipeline_id, "--results", results)
    assert code == 0, err
    _one_warning(err, path, problem)
    shown = [line.split()[2] for line in out.splitlines()[2:]]
    assert shown == visible

    code, out, err = _run(capsys, "status", "--results", results)
    assert code == 0, err
    _one_warning(err, path, problem)
    assert re.search(rf"^{pipeline_id} ", out, re.MULTILINE)


@pytest.mark.parametrize("kind", DAMAGES)
def test_cancel_cancels_the_jobs_still_readable(kind, fake_slurm, launch, tmp_path, capsys):
    damage, problem, visible = DAMAGES[kind]
    results, path, pipeline_id = _submit_and_damage(fake_slurm, launch, tmp_path, damage)
    calls = fake_slurm(squeue=ALL_LIVE)
    calls.write_text("")

    code, out, err = _run(capsys, "cancel", pipeline_id, "--results", results)
    assert code == 0, err
    _one_warning(err, path, problem)
    assert _calls(calls, "scancel") == [f"scancel {' '.join(visible)}"]
    assert f"cancelled {len(visible)} of {len(visible)} jobs" in out


def _tagged_squeue(record: dict, job_ids) -> str:
    """A fake squeue body: the live-run check's query (`--format=%F|%T|%Z|%j|%k`) lists `job_ids` of `record` as
    Slurm would, with their tags and directories; other queries list nothing live."""
    lines = [
        f"{job['job_id']}|PENDING|{job['directory']}|{job['job_name']}|{job['tag']}"
        for job in record["jobs"]
        if job["job_id"] in job_ids
    ]
    listing = "\\n".join(lines)
    return f'case "$*" in *%Z*) printf "{listing}\\n";; esac'


@pytest.mark.parametrize("kind", DAMAGES)
def test_on_slurm_a_damaged_record_hides_no_live_job_from_the_guard(kind, fake_slurm, launch, tmp_path):
    damage, problem, visible = DAMAGES[kind]
    results, path, _ = _submit_and_damage(fake_slurm, launch, tmp_path, lambda path: None)
    whole = json.loads(path.read_text())
    damage(path)
    hidden = [job["job_id"] for job in whole["jobs"] if job["job_id"] not in visible]
    calls = fake_slurm(squeue=_tagged_squeue(whole, hidden))  # only the job the damage hides is still queued
    calls.write_text("")

    code, out, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 5, (out, err)
    _one_warning(err, path, problem)
    (refusal,) = [line for line in err.splitlines() if line.startswith("Error:")]
    assert f"jobs of this run are still queued or running: {hidden[0]} (" in refusal
    assert "no ledger entry, PENDING)" in refusal and f"cancel {whole['id']}" in refusal
    assert _calls(calls, "sbatch") == [] and len(list(path.parent.glob("*.json"))) == 1

    # Once Slurm lists nothing live for this run, the damage alone refuses nothing: it is named, and the
    # pipeline is submitted.
    calls = fake_slurm(squeue="true")
    code, out, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 0, err
    _one_warning(err, path, problem)
    assert len(_calls(calls, "sbatch")) == 3 and len(list(path.parent.glob("*.json"))) == 2


def test_readable_jobs_of_a_damaged_record_still_refuse_a_resubmission(fake_slurm, launch, tmp_path):
    # resubmit_while_running=true passes the damage, but the live jobs still read from it keep their own rule:
    # the config they read may not change under them.
    results, path, _ = _submit_and_damage(fake_slurm, launch, tmp_path, _cut_in_the_last_job)
    code, out, err = launch(
        THREE_STAGES + ["resubmit_while_running=true", "training.trainer.max_steps=41"], debug=False, results=results
    )
    assert code == 5, (out, err)
    assert "live jobs read this file (1001 (training" in err and "would change it" in err


@pytest.mark.parametrize("content", ["", "null", "[1, 2]", '{"id": "x", "cluster_type": "bcm", "jobs": [nul'])
def test_a_record_with_no_readable_job_is_left_out_but_named(content, fake_slurm, launch, tmp_path, capsys):
    results, path, first_id = _submit_and_damage(fake_slurm, launch, tmp_path, lambda path: None)
    broken = path.parent / "20000101-000000-broken-0000.json"
    broken.write_text(content)

    code, out, err = _run(capsys, "status", "--results", results)
    assert code == 0, err
    assert "Traceback" not in err and err.count(f"ledger record {broken} is damaged (") == 1
    assert "status and cancel leave it out" in err
    assert [line.split()[0] for line in out.splitlines()[1:]] == [first_id]

    code, out, err = _run(capsys, "cancel", "broken", "--results", results)
    assert code == 2 and "Traceback" not in err and f"ledger record {broken} is damaged" in err

    # Slurm lists no live job of this run: the damaged record is named and refuses nothing.
    fake_slurm(squeue="true")
    code, out, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 0 and f"ledger record {broken} is damaged (" in err, (out, err)


def test_every_field_is_checked(tmp_path):
    path = tmp_path / "r.json"
    record = {"id": "r", "created": 3, "argv": ["main.py", None], "cwd": "/", "user": "u", "host": "h"}
    record.update(cluster_type="bcm", launcher_commit=None, stages=["training"], state="lost", jobs=[])
    path.write_text(json.dumps(record))
    kept, damage = read_record(path)
    assert kept is None and damage.record is None
    assert damage.problems == (
        '"created" is a number, not text',
        '"argv" is a list, not a list of text',
        '"state" is text, not one of submitting, submitted, rolled_back, abandoned, running, finished, failed, '
        "interrupted",
    )
    assert damage.hides_jobs  # a record without jobs names no backend to ask: nothing can be told of it


def test_damage_outside_the_jobs_hides_no_job_and_refuses_nothing(fake_slurm, launch, tmp_path, capsys):
    # Every job entry reads whole: the scheduler can still be asked about each, so only live jobs refuse.
    def lose_the_state(path: Path) -> None:
        path.write_text(path.read_text().replace('"state": "submitted"', '"state": null'))

    results, path, pipeline_id = _submit_and_damage(fake_slurm, launch, tmp_path, lose_the_state)
    code, out, err = _run(capsys, "status", pipeline_id, "--results", results)
    assert code == 0, err
    _one_warning(err, path, '"state" is null, not one of submitting')
    assert [line.split()[2] for line in out.splitlines()[2:]] == ["1001", "1002", "1003"]

    code, out, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 5 and "jobs of this run are still queued or running: 1001 (training" in err, (out, err)
    assert "damaged ledger records" not in err

    fake_slurm(squeue="true")  # they ended: the same command is accepted
    code, out, err = launch(THREE_STAGES, debug=False, results=results)
    assert code == 0, err
    _one_warning(err, path, '"state" is null')
