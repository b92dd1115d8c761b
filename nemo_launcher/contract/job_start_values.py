"""Values a platform knows only when the job starts: Base Command Platform's node count.

An NGC job's node count is its replica count, chosen when the job is created and handed to every replica as
NGC_ARRAY_SIZE; the seed's BCP commands pass it on as `training.trainer.num_nodes=\\$NGC_ARRAY_SIZE`. The launcher
keeps such a value as the reference `$NGC_ARRAY_SIZE` in the config it writes and in the script (for the job's
shell to expand); the job replaces it by the number from its environment before it binds its schema, so every rule
that needs the number is checked there by the same code that checks the rest at launch.

    reference = job_start_reference("${NGC_ARRAY_SIZE}")        # AtJobStart("NGC_ARRAY_SIZE"), or None
    section = resolve_job_start_values(section, os.environ)     # job side: "$NGC_ARRAY_SIZE" -> 4
"""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from .binding import JobConfigError, config_fault

# Variable -> what it holds. Only these may stand for a value; any other `$NAME` is an ordinary string.
VARIABLES = {"NGC_ARRAY_SIZE": "the replica (node) count of the NGC job"}
# The keys (under a stage's section) that may wait for the job start: a job's node count, the one number the
# platform decides late, which a stage turns into the job's size.
NODE_COUNT_KEYS = ("trainer.num_nodes", "run.nodes")
PLATFORM = "bcp"

_REFERENCE = re.compile(r"\$(?:\{(?P<braced>\w+)\}|(?P<bare>\w+))")


@dataclasses.dataclass(frozen=True)
class AtJobStart:
    """A number the job's environment supplies when it starts, e.g. NGC_ARRAY_SIZE."""

    variable: str

    def __str__(self) -> str:
        return f"${self.variable}"


def job_start_reference(value: Any) -> AtJobStart | None:
    """`$NGC_ARRAY_SIZE` or `${NGC_ARRAY_SIZE}` (the whole value) -> AtJobStart; anything else -> None."""
    if not isinstance(value, str):
        return None
    match = _REFERENCE.fullmatch(value.strip())
    if match is None:
        return None
    variable = match.group("braced") or match.group("bare")
    return AtJobStart(variable) if variable in VARIABLES else None


def find_job_start_values(data: Any, prefix: str = "") -> list[tuple[str, AtJobStart]]:
    """(full key, reference) of every value in `data` that waits for the job start, in document order."""
    if isinstance(data, Mapping):
        return [hit for key, value in data.items() for hit in find_job_start_values(value, _join(prefix, key))]
    if isinstance(data, list):
        return [hit for i, value in enumerate(data) for hit in find_job_start_values(value, f"{prefix}[{i}]")]
    reference = job_start_reference(data)
    return [(prefix, reference)] if reference is not None else []


def check_waiting_key(stage: str, key: str, reference: AtJobStart, cluster_type: str) -> None:
    """Only a job's node count (`key` under the stage's section) may wait, and only on the platform that sets it."""
    full_key = _join(stage, key)
    if key not in NODE_COUNT_KEYS:
        raise config_fault(
            full_key,
            str(reference),
            f"only a job's node count ({' or '.join(NODE_COUNT_KEYS)}) can wait for the job start; "
            f"${reference.variable} is {VARIABLES[reference.variable]}: give this key a value",
        )
    if cluster_type != PLATFORM:
        raise config_fault(
            full_key,
            str(reference),
            f"${reference.variable} exists only inside a Base Command Platform job (cluster_type=bcp); "
            f"on cluster_type={cluster_type} give the node count, e.g. {full_key}=2",
        )


def substitute(data: Any, numbers: Mapping[str, int]) -> Any:
    """A copy of `data` with each job-start reference replaced by numbers[its variable]."""
    if isinstance(data, Mapping):
        return {key: substitute(value, numbers) for key, value in data.items()}
    if isinstance(data, list):
        return [substitute(value, numbers) for value in data]
    reference = job_start_reference(data)
    return numbers[reference.variable] if reference is not None else data


def resolve_job_start_values(data: Any, environ: Mapping[str, str], prefix: str = "") -> Any:
    """The job side: each reference replaced by the positive integer its variable holds in `environ`."""
    numbers = {}
    for key, reference in find_job_start_values(data, prefix):
        text = environ.get(reference.variable)
        if text is None or not text.strip().isdigit() or int(text) < 1:
            shown = "is not set" if text is None else f"is {text!r}, not a positive integer"
            raise JobConfigError(
                f"{key}={str(reference)!r}: {reference.variable} {shown} in this job's environment; it holds "
                f"{VARIABLES[reference.variable]} and Base Command Platform sets it in every replica (run the "
                "script inside an NGC job, or give the key a number)"
            )
        numbers[reference.variable] = int(text)
    return substitute(data, numbers) if numbers else data


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)
