"""Binding a stage section whose node count waits for the job start (`trainer.num_nodes=$NGC_ARRAY_SIZE` on BCP).

The launcher cannot know the number, so it binds the section once per plausible node count with the same schema
the job binds: a rule that fails for every count does not depend on the number and is refused now, as any other
mistake; the counts that pass are printed in the plan, so the user picks the NGC job's replica count from them,
and the job checks the one it gets when it starts.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..contract.binding import JobConfigError
from ..contract.job_start_values import AtJobStart, check_waiting_key, find_job_start_values, substitute
from .errors import ConfigError

# Node counts tried: every count a small job uses, then the usual large allocations.
CANDIDATE_COUNTS = tuple(range(1, 65)) + (
    72, 80, 96, 112, 128, 144, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048,
)  # fmt: skip
SHOWN_COUNTS = 12


@dataclass(frozen=True)
class WaitingBinding:
    """A section bound for the smallest node count its rules accept, and what the plan says about the rest."""

    bound: Any  # the schema instance at counts[0]
    waiting: dict[str, AtJobStart]  # full key (e.g. training.trainer.num_nodes) -> reference
    counts: tuple[int, ...]  # the candidate node counts every rule accepts

    def note(self) -> str:
        keys = ", ".join(f"{key}={reference}" for key, reference in self.waiting.items())
        shown = ", ".join(str(count) for count in self.counts[:SHOWN_COUNTS])
        more = ", ..." if len(self.counts) > SHOWN_COUNTS else ""
        variable = next(iter(self.waiting.values())).variable
        return (
            f"{keys}: set when the NGC job starts; the rules on the node count are checked then; "
            f"this config accepts {variable} = {shown}{more}"
        )


def bind_waiting(schema, config: Mapping[str, Any], stage: str, cluster_type: str) -> WaitingBinding | None:
    """None when nothing in `config` waits for the job start; else the section bound as the module says."""
    found = find_job_start_values(config)
    if not found:
        return None
    for key, reference in found:
        check_waiting_key(stage, key, reference, cluster_type)
    found = [(f"{stage}.{key}", reference) for key, reference in found]
    variables = {reference.variable for _, reference in found}
    bound, counts, errors = None, [], {}
    for count in CANDIDATE_COUNTS:
        try:
            instance = schema.from_dict(substitute(config, dict.fromkeys(variables, count)), stage)
        except JobConfigError as error:
            errors[count] = str(error)
            continue
        bound = bound if bound is not None else instance
        counts.append(count)
    if not counts:
        raise ConfigError(_refusal(found[0], errors))
    return WaitingBinding(bound, dict(found), tuple(counts))


def _refusal(first: tuple[str, AtJobStart], errors: dict[int, str]) -> str:
    messages = set(errors.values())
    if len(messages) == 1:
        return messages.pop()  # a rule that does not involve the node count
    key, reference = first
    return (
        f"{key}={str(reference)!r}: no node count from {CANDIDATE_COUNTS[0]} to {CANDIDATE_COUNTS[-1]} satisfies "
        f"this config; with {CANDIDATE_COUNTS[0]} node: {errors[CANDIDATE_COUNTS[0]]}"
    )
