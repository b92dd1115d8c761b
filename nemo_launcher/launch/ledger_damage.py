"""Reading one ledger record file and checking every field of it, so that a damaged record is named, never a
traceback.

    record, damage = read_record(path)   # damage is None for a whole, valid record

A record can be damaged by a disk that filled up mid-write, an edit by hand, or a copy cut short. What can still be
trusted is kept: the fields that are valid, and the job entries that are whole and valid (of a file cut short,
the entries before the cut), so that jobs whose ids can still be read stay visible to `status` and `cancel`.
Standard library only.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# What a record's `state` may be: queued backends go submitting -> submitted | rolled_back, or -> abandoned when
# the launcher died mid-submission and a later command adopted what it had queued (orphans.py); backends that run
# the jobs here go running -> finished | failed | interrupted (Ctrl-C or SIGTERM stopped the launcher).
STATES = ("submitting", "submitted", "rolled_back", "abandoned", "running", "finished", "failed", "interrupted")
FIX = "inspect its jobs (squeue -u $USER on Slurm, ps on the host that ran them), then repair or remove the file"
_MOST_PROBLEMS_NAMED = 3
_WHITESPACE = re.compile(r"\s*")


def _text(value) -> bool:
    return isinstance(value, str)


def _text_or_null(value) -> bool:
    return value is None or isinstance(value, str)


def _whole_number_or_null(value) -> bool:
    return value is None or type(value) is int  # bool is an int to isinstance; true is no exit code


def _texts(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _configs(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict) and _text(item.get("path")) and _text(item.get("sha256")) for item in value
    )


# What each field must hold: (test, the words a warning uses for it).
_Check = tuple[Callable[[object], bool], str]
RECORD_FIELDS: dict[str, _Check] = {
    "id": (_text, "text"),
    "created": (_text, "text"),
    "argv": (_texts, "a list of text"),
    "cwd": (_text, "text"),
    "user": (_text, "text"),
    "host": (_text, "text"),
    "cluster_type": (_text, "text"),
    "launcher_commit": (_text_or_null, "text or null"),
    "stages": (_texts, "a list of text"),
    "state": (lambda value: value in STATES, "one of " + ", ".join(STATES)),
}
JOB_FIELDS: dict[str, _Check] = {
    "stage": (_text, "text"),
    "job_name": (_text, "text"),
    "run_name": (_text, "text"),
    "directory": (_text, "text"),
    "script": (_text, "text"),
    "script_sha256": (_text, "text"),
    "configs": (_configs, "a list of {path, sha256}"),
    "job_id": (_text_or_null, "text or null"),
    "dependency": (_texts, "a list of text"),
    "array": (_text_or_null, "text or null"),
    "log_glob": (_text, "text"),
}
# Written by newer launchers only; checked where present.
OPTIONAL_RECORD_FIELDS: dict[str, _Check] = {
    "launcher_pid": (_whole_number_or_null, "a whole number or null"),
    "launcher_started": (_text_or_null, "text or null"),
    "adopted": (_texts, "a list of text"),
}
OPTIONAL_JOB_FIELDS: dict[str, _Check] = {"tag": (_text, "text")}
# Only jobs the launcher runs itself (interactive, bcp) carry these; checked where present.
RUN_HERE_FIELDS: dict[str, _Check] = {
    "exit_code": (_whole_number_or_null, "a whole number or null"),
    "started": (_text_or_null, "text or null"),
    "ended": (_text_or_null, "text or null"),
    "pid": (_whole_number_or_null, "a whole number or null"),
}


@dataclass(frozen=True)
class Damage:
    path: Path
    problems: tuple[str, ...]
    record: dict | None  # what can still be trusted (valid fields, whole valid jobs); None when no job can be read
    hides_jobs: bool  # some job entry could not be read: the jobs it named may be live, and nobody can tell

    def describe(self) -> str:
        named = "; ".join(self.problems[:_MOST_PROBLEMS_NAMED])
        more = len(self.problems) - _MOST_PROBLEMS_NAMED
        return named + (f"; and {more} more" if more > 0 else "")

    def warning(self) -> str:
        if self.record is None:
            shown = "status and cancel leave it out"
        else:
            shown = f"status and cancel show only its {len(self.record['jobs'])} readable job(s)"
        return f"Warning: ledger record {self.path} is damaged ({self.describe()}); {shown}; {FIX}"


def read_record(path: Path) -> tuple[dict | None, Damage | None]:
    """(the record, None) when the file is whole and every field valid; else (what can be trusted or None, the
    damage)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as error:
        return None, Damage(path, (f"cannot be read: {error.strerror or error}",), None, True)
    problems: list[str] = []
    broke_off = False
    try:
        content = json.loads(text)
    except ValueError as error:
        problems.append(f"the JSON breaks off or is malformed at line {error.lineno} column {error.colno}")
        content = _members_before_the_break(text)
        broke_off = True
    if not isinstance(content, dict):
        return None, Damage(path, (f"holds {_kind(content)}, not a JSON object",), None, True)
    kept = {}
    for key, (valid, words) in RECORD_FIELDS.items():
        if key not in content:
            problems.append(f'no "{key}"')
        elif not valid(content[key]):
            problems.append(f'"{key}" is {_kind(content[key])}, not {words}')
        else:
            kept[key] = content[key]
    for key, (valid, words) in OPTIONAL_RECORD_FIELDS.items():
        if key in content and not valid(content[key]):
            problems.append(f'"{key}" is {_kind(content[key])}, not {words}')
        elif key in content:
            kept[key] = content[key]
    jobs = content.get("jobs")
    if not isinstance(jobs, list):
        problems.append('no "jobs" list' if jobs is None else f'"jobs" is {_kind(jobs)}, not a list')
        jobs, broke_off = [], True
    kept["jobs"] = [job for index, job in enumerate(jobs) if not _job_problems(index, job, problems)]
    if not problems:
        return content, None
    kept.setdefault("id", path.stem)  # the file is named after the id it records
    usable = "cluster_type" in kept and kept["jobs"]  # without the backend, nobody knows whom to ask about the jobs
    hides_jobs = broke_off or len(kept["jobs"]) < len(jobs) or not usable
    return None, Damage(path, tuple(problems), kept if usable else None, hides_jobs)


def _job_problems(index: int, job, problems: list[str]) -> bool:
    """Adds what is wrong with job entry `index` to `problems`; returns whether anything is."""
    before = len(problems)
    if not isinstance(job, dict):
        problems.append(f"jobs[{index}] is {_kind(job)}, not an object")
        return True
    for key, (valid, words) in JOB_FIELDS.items():
        if key not in job:
            problems.append(f'jobs[{index}] has no "{key}"')
        elif not valid(job[key]):
            problems.append(f"jobs[{index}].{key} is {_kind(job[key])}, not {words}")
    for key, (valid, words) in {**OPTIONAL_JOB_FIELDS, **RUN_HERE_FIELDS}.items():
        if key in job and not valid(job[key]):
            problems.append(f"jobs[{index}].{key} is {_kind(job[key])}, not {words}")
    return len(problems) > before


def _kind(value) -> str:
    if value is None:
        return "null"
    names = {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _members_before_the_break(text: str) -> dict:
    """The members of a JSON object that are whole before the text breaks off; a `jobs` list that breaks off
    keeps its whole entries. The ledger writes `jobs` last, so a file cut short keeps every field before it."""
    decoder = json.JSONDecoder()
    found: dict = {}
    position = _skip(text, 0)
    if not text.startswith("{", position):
        return found
    position += 1
    while True:
        try:
            key, position = decoder.raw_decode(text, _skip(text, position))
        except ValueError:
            return found
        position = _skip(text, position)
        if not isinstance(key, str) or not text.startswith(":", position):
            return found
        position = _skip(text, position + 1)
        try:
            value, position = decoder.raw_decode(text, position)
        except ValueError:
            if key == "jobs" and text.startswith("[", position):
                found[key] = _items_before_the_break(text, position + 1)
            return found
        found[key] = value
        position = _skip(text, position)
        if not text.startswith(",", position):
            return found
        position += 1


def _items_before_the_break(text: str, position: int) -> list:
    decoder = json.JSONDecoder()
    items = []
    while True:
        try:
            item, position = decoder.raw_decode(text, _skip(text, position))
        except ValueError:
            return items
        items.append(item)
        position = _skip(text, position)
        if not text.startswith(",", position):
            return items
        position += 1


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()
