"""Reading the resolved `data_preparation` YAML and deciding which items this process handles.

Every data step starts the same way:

    cfg = StepConfig.from_argv("download")        # parses --config <job dir>/<run.name>_hydra.yaml
    numbers = cfg.file_numbers()                  # the shards named by file_numbers
    mine = this_task_items(numbers)               # one shard on a Slurm array task, a share on BCP, else all

The launcher resolved every interpolation before writing the file, so this module only reads plain YAML.
Errors name the key as the user writes it on the command line (`data_preparation.<key>`).
"""

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

from nemo_launcher.contract.file_numbers import FileNumbersError, parse_file_numbers

from ..common.errors import DataPrepError

_MISSING = object()


class DataConfigError(DataPrepError):
    """A missing or invalid key in the data preparation config; the message names the key and the fix."""


class StepConfig:
    """The resolved `data_preparation` section, with typed accessors that name the full key on error."""

    def __init__(self, values: dict, source: str = "<dict>", bound=None):
        if not isinstance(values, dict):
            raise DataConfigError(f"{source}: expected a mapping of data_preparation keys, got {type(values).__name__}")
        self.values = values
        self.source = source
        self._bound = bound

    @property
    def bound(self):
        """The section bound to its dataset's schema (PileConfig, Mc4Config or CustomDatasetConfig): typed values
        with the schema's defaults filled in, what every step reads. Bound on first use when built from a dict."""
        if self._bound is None:
            self._bound = _bind_data_preparation(self.values)
        return self._bound

    @classmethod
    def from_file(cls, path: str) -> "StepConfig":
        """Reads the file and binds it to the data_preparation schema, as the launcher did before submitting."""
        if not os.path.isfile(path):
            raise DataConfigError(f"--config {path}: no such file")
        with open(path) as handle:
            values = yaml.safe_load(handle) or {}
        return cls(values, path, bound=_bind_data_preparation(values))

    @classmethod
    def from_argv(cls, step: str, argv: Sequence[str] = None) -> "StepConfig":
        parser = argparse.ArgumentParser(prog=f"python3 -m nemo_launcher.jobs.data.{step}")
        parser.add_argument(
            "--config", required=True, help="the resolved data_preparation YAML (<run.name>_hydra.yaml)"
        )
        args = parser.parse_args(argv)
        return cls.from_file(args.config)

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """The value at a dotted key; without a default a missing key is an error naming it."""
        node: Any = self.values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is _MISSING:
                    raise DataConfigError(f"data_preparation.{key} is missing from {self.source}")
                return default
            node = node[part]
        return node

    def text(self, key: str, default: Any = _MISSING) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not value:
            raise DataConfigError(f"data_preparation.{key}={value!r}: expected a non-empty string")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise DataConfigError(f"data_preparation.{key}={value!r}: expected true or false")
        return value

    def positive_int(self, key: str, default: Any = _MISSING) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DataConfigError(f"data_preparation.{key}={value!r}: expected a positive integer")
        return value

    def choice(self, key: str, choices: Sequence[str], default: Any = _MISSING) -> str:
        value = self.get(key, default)
        if value not in choices:
            raise DataConfigError(f"data_preparation.{key}={value!r}: expected one of {', '.join(choices)}")
        return value

    def file_numbers(self) -> list[int]:
        try:
            return parse_file_numbers(self.get("file_numbers"), key="data_preparation.file_numbers")
        except FileNumbersError as error:
            raise DataConfigError(str(error)) from None


def _bind_data_preparation(values: dict):
    from nemo_launcher.contract.binding import JobConfigError
    from nemo_launcher.contract.schemas.data_preparation import DataPreparation

    try:
        return DataPreparation.from_dict(values)
    except JobConfigError as error:
        raise DataConfigError(str(error)) from None


def load_bound(schema, program: str, argv: Sequence[str] = None):
    """Parses `--config <resolved data_preparation YAML>` and binds it to `schema` (a contract class with
    from_dict), as the launcher did before submitting; `program` is the module the usage line names."""
    from nemo_launcher.contract.binding import JobConfigError

    parser = argparse.ArgumentParser(prog=f"python3 -m {program}")
    parser.add_argument("--config", required=True, help="the resolved data_preparation YAML (<run.name>_hydra.yaml)")
    path = parser.parse_args(argv).config
    if not os.path.isfile(path):
        raise DataConfigError(f"--config {path}: no such file")
    with open(path) as handle:
        values = yaml.safe_load(handle) or {}
    try:
        return schema.from_dict(values)
    except JobConfigError as error:
        raise DataConfigError(str(error)) from None


def this_task_items(items: list[int], env=None) -> list[int]:
    """The part of `items` this process handles.

    - Slurm array task: SLURM_ARRAY_TASK_ID is the item itself (a file number, or a node index for
      node-indexed steps), so task i of the download array and task i of the extract array handle the same
      shard and `aftercorr` chaining waits for exactly the shard each task needs.
    - BCP / mpirun: items are dealt round-robin over RANK (or OMPI_COMM_WORLD_RANK) out of WORLD_SIZE.
    - Otherwise (interactive, a plain job): every item, one after another.
    """
    env = os.environ if env is None else env
    task = env.get("SLURM_ARRAY_TASK_ID")
    if task is not None:
        if not task.isdigit() or int(task) not in items:
            raise DataConfigError(
                f"SLURM_ARRAY_TASK_ID={task!r} is not one of the configured items {items}; "
                f"the --array range must come from the same config"
            )
        return [int(task)]
    rank = env.get("RANK", env.get("OMPI_COMM_WORLD_RANK"))
    world = env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE"))
    if rank is not None and world is not None:
        rank_i, world_i = int(rank), int(world)
        if not 0 <= rank_i < world_i:
            raise DataConfigError(f"RANK={rank} is outside WORLD_SIZE={world}")
        return items[rank_i::world_i]
    return list(items)


def this_task_workers(nodes: int, per_node: int, env=None) -> list[int]:
    """The worker slots (0 .. nodes x per_node - 1) this process handles, for steps run as several tasks per node.

    - Slurm array task: node SLURM_ARRAY_TASK_ID's slots node*per_node .. node*per_node+per_node-1, dealt over the
      task's processes by SLURM_LOCALID out of SLURM_NTASKS_PER_NODE (one slot each when they are equal).
    - BCP / mpirun / torchrun: all slots dealt round-robin over RANK out of WORLD_SIZE.
    - Otherwise: every slot, one after another.
    """
    env = os.environ if env is None else env
    slots = list(range(nodes * per_node))
    if env.get("SLURM_ARRAY_TASK_ID") is not None:
        (node,) = this_task_items(list(range(nodes)), env)
        mine = slots[node * per_node : (node + 1) * per_node]
        local = int(env.get("SLURM_LOCALID", "0"))
        tasks = int(env.get("SLURM_NTASKS_PER_NODE", env.get("SLURM_STEP_NUM_TASKS", "1")) or 1)
        return mine[local::tasks] if 0 <= local < tasks else []
    return this_task_items(slots, {key: value for key, value in env.items() if key != "SLURM_ARRAY_TASK_ID"})


def task_cpus(cfg: StepConfig) -> int:
    """CPUs this process may use: its affinity mask, at most run.cpus_per_node / run.workers_per_node (the
    --cpus-per-task of a step with one task per worker) where several tasks share a node without Slurm's binding."""
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpus_per_node, per_node = cfg.get("run.cpus_per_node", None), cfg.get("run.workers_per_node", None)
    if isinstance(cpus_per_node, int) and isinstance(per_node, int) and per_node > 0:
        available = min(available, max(1, cpus_per_node // per_node))
    return max(1, available)


def processes_on_this_node(env=None) -> int:
    """How many copies of this step share the node (BCP starts bcp_preproc_npernode per node), at least 1."""
    env = os.environ if env is None else env
    for name in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def worker_count(cfg: StepConfig, env=None) -> int:
    """Tokenizer worker processes for this process: run.workers_per_node split among the step's processes
    on the node; null means one per CPU this process may use."""
    configured = cfg.get("run.workers_per_node", None)
    if configured is None:
        available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    else:
        if isinstance(configured, bool) or not isinstance(configured, int) or configured < 1:
            raise DataConfigError(
                f"data_preparation.run.workers_per_node={configured!r}: expected a positive integer or null"
            )
        available = configured
    return max(1, available // processes_on_this_node(env))


def run_step(main) -> None:
    """Runs a step's main() and prints the summary of the StepReport it returns. User errors print one line
    and exit 2 (full traceback with NEMO_LAUNCHER_FULL_ERROR=1)."""
    from ..common.quiet import start_job
    from ..common.report import print_error

    # Each process of a data step works alone (an array task, or its share of the items on BCP).
    start_job(accelerators=False)
    started = time.monotonic()
    try:
        report = main()
    except DataPrepError as error:
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR", "").lower() in ("1", "true"):
            raise
        sys.exit(print_error(error))
    if report is not None:
        report.summary(time.monotonic() - started).show(rank=None)
