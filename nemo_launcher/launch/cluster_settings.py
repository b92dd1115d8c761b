"""The `cluster` section (conf/cluster/bcm.yaml): one check per key, made when the context is read.

`check_cluster(section)` runs before any stage config is resolved, so a bad value is reported as itself and not
as a failure inside a resolver that divides by it (`${divide_ceil:..., ${cluster.gpus_per_node}}`).
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..contract.durations import clock_text
from ..contract.performance.gpus import GPU_PROFILES
from .errors import config_error

# Seconds before the time limit that Slurm sends SIGUSR1 when cluster.signal_seconds_before_limit is unset.
DEFAULT_SIGNAL_LEAD_S = 300

# Slurm sizes: a number with an optional unit; a bare number is megabytes to Slurm.
_SLURM_SIZE = re.compile(r"^[0-9]+[KMGTkmgt]?$")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _slurm_name_or_null(value) -> bool:
    # sbatch reads a comma as a list of names and a space as the end of the value.
    return value is None or (isinstance(value, str) and value != "" and not re.search(r"[\s,]", value))


def _bool(value) -> bool:
    return isinstance(value, bool)


def _count_or_null(value) -> bool:
    return value is None or (_is_int(value) and value >= 1)


def _count(value) -> bool:
    return _is_int(value) and value >= 1


def _memory(value) -> bool:
    if _is_int(value):
        return value >= 0
    return isinstance(value, str) and bool(_SLURM_SIZE.match(value))


def _job_name_prefix(value) -> bool:
    # The prefix starts every job name and every log file name: a slash would move the log into another
    # directory, and Slurm cannot write a log path holding a backslash or a line break.
    return isinstance(value, str) and not re.search(r"[/\\\n\r\0]", value)


def _price_or_null(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0)


def _list_of_strings(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


# key -> (accepts the value, how to fix it). These are the keys the launcher interprets; any other key of the
# section is passed to sbatch as is (see backends/slurm.py).
CLUSTER_SETTINGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "partition": (
        _slurm_name_or_null,
        "use a partition name without spaces or commas, or null for the default partition",
    ),
    "account": (_slurm_name_or_null, "use an account name without spaces or commas, or null for your default account"),
    "exclusive": (_bool, "use true (whole nodes) or false"),
    "overcommit": (_bool, "use true or false"),
    "gpus_per_node": (_count_or_null, "use the number of GPUs of a node (an integer >= 1), or null to ask for no GPUs"),
    "gpus_per_task": (_count_or_null, "use an integer >= 1, or null"),
    "mem": (
        _memory,
        "use 0 (all the memory of a node), a whole number of GB such as 500, or a Slurm size such as 500G",
    ),
    "job_name_prefix": (_job_name_prefix, 'use text without slashes, backslashes or line breaks ("" for no prefix)'),
    "srun_args": (_list_of_strings, "use a list of srun options, e.g. [--mpi=pmix]"),
    "signal_seconds_before_limit": (_count, "use a whole number of seconds >= 1"),
    "gpu_type": (lambda value: value in GPU_PROFILES, f"use one of {', '.join(GPU_PROFILES)}"),
    "gpu_hour_price": (_price_or_null, "use the price of one GPU-hour (a number >= 0), or null for no cost"),
}


def check_cluster(section: Mapping[str, Any]) -> None:
    """Raises ConfigError `cluster.<key>=<value>: <fix>` for the first key holding a value it cannot use."""
    for key, (accepts, fix) in CLUSTER_SETTINGS.items():
        if key in section and not accepts(section[key]):
            raise config_error(f"cluster.{key}", section[key], fix)


def signal_lead_seconds(cluster: Mapping[str, Any]) -> int:
    """How long before its time limit a checkpointing job gets SIGUSR1 (sbatch --signal=USR1@<this>)."""
    return int(cluster.get("signal_seconds_before_limit") or DEFAULT_SIGNAL_LEAD_S)


def check_signal_lead(cluster: Mapping[str, Any], stage: str, time_limit_s: int) -> None:
    """A job whose time limit is not longer than the signal lead gets SIGUSR1 as it starts: it saves before its
    first step and stops, and a job that requeues itself then starts, stops and requeues for ever."""
    lead = signal_lead_seconds(cluster)
    if time_limit_s <= lead:
        raise config_error(
            f"{stage}.run.time_limit",
            clock_text(time_limit_s),
            f"Slurm signals the job to save and stop {lead} s before its time limit "
            f"(cluster.signal_seconds_before_limit), so it would stop as it starts: set a time limit above "
            f"{clock_text(lead)}, or lower cluster.signal_seconds_before_limit",
        )
