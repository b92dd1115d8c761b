"""Input files checked at launch: a data prefix, a tokenizer file, a checkpoint or a .nemo that a job would open
must exist, unless an earlier job of the same pipeline (or the job itself, in an earlier step) writes it.

Each job spec declares what it reads, as (config key, path or glob), and the paths it writes (its schema's
`reads()`/`writes()`; every job also writes its own directory). The check looks from the launch host: compute
nodes may mount filesystems this host does not see, so the message says so, and `check_inputs=false` turns the
check off for such clusters (the preflight then checks the data directory from a compute node). A dry run reports
what a real run would refuse as warnings, so that it still works on a laptop without the data.
"""

import glob
import os
import sys
from collections.abc import Sequence
from pathlib import PurePosixPath

from .errors import ConfigError
from .job_spec import JobSpec

Missing = tuple[JobSpec, str, str]  # (job, config key, path or pattern)


def _fixed_part(pattern: str) -> PurePosixPath:
    """The leading part of a path that holds no glob character."""
    parts = []
    for part in PurePosixPath(pattern).parts:
        if glob.has_magic(part):
            break
        parts.append(part)
    return PurePosixPath(*parts)


def _written_before(pattern: str, written: Sequence[str]) -> bool:
    path = _fixed_part(pattern)
    return any(path == PurePosixPath(w) or PurePosixPath(w) in path.parents for w in written)


def _exists(pattern: str) -> bool:
    return bool(glob.glob(pattern)) if glob.has_magic(pattern) else os.path.exists(pattern)


def missing_inputs(specs_by_stage: Sequence[Sequence[JobSpec]]) -> list[Missing]:
    """Every declared input that no earlier job writes and that this host cannot see, in pipeline order."""
    written: list[str] = []
    missing: list[Missing] = []
    for specs in specs_by_stage:
        for spec in specs:
            own = [str(spec.directory), *spec.writes]
            for key, pattern in spec.reads:
                if not _written_before(pattern, written + own) and not _exists(pattern):
                    missing.append((spec, key, pattern))
            written += own
    return missing


def empty_datasets(specs_by_stage: Sequence[Sequence[JobSpec]]) -> list[Missing]:
    """Every data prefix read whose `.bin` this host sees with 0 bytes and no earlier job rewrites: a dataset with
    no document, which megatron-core cannot open (it names no file when it fails, after the queue wait)."""
    written: list[str] = []
    empty: list[Missing] = []
    for specs in specs_by_stage:
        for spec in specs:
            own = [str(spec.directory), *spec.writes]
            for key, path in spec.reads:
                if (
                    key.endswith("data_prefix")
                    and path.endswith(".bin")
                    and not _written_before(path, written + own)
                    and os.path.isfile(path)
                    and os.path.getsize(path) == 0
                ):
                    empty.append((spec, key, path))
            written += own
    return empty


def _describe_empty(item: Missing) -> str:
    spec, key, path = item
    return (
        f"{key}={_as_typed(key, path)!r}: {path} is empty (0 bytes), a dataset with no document "
        f"({spec.stage} job {spec.name}); rerun the data preparation that wrote it on input that holds documents, "
        f"or leave this prefix out of the blend"
    )


# What a data prefix read becomes: the job opens <prefix>.bin and <prefix>.idx (common_training.data_reads).
_INDEXED_SUFFIXES = (".bin", ".idx")


def _as_typed(key: str, path: str) -> str:
    """The value as the user wrote it: a data prefix's read is <prefix>.bin or <prefix>.idx."""
    if key.endswith("data_prefix") and path.endswith(_INDEXED_SUFFIXES):
        return path[: -len(".bin")]
    return path


def check_input_paths(specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
    """Raises ConfigError for the first input or output named by a relative path. Every backend starts a job in its
    own directory (sbatch on a compute node, bcprun in the NGC job, bash here), so a relative input names another
    file there, or none, and a relative output lands where no later stage looks. Checked whatever check_inputs
    says: it needs no filesystem."""
    for specs in specs_by_stage:
        config = None
        for spec in specs:
            for key, pattern in spec.reads:
                if not PurePosixPath(pattern).is_absolute():
                    typed = _as_typed(key, pattern)
                    raise ConfigError(
                        f"{key}={typed!r}: use an absolute path; the {spec.stage} job starts in {spec.directory}, "
                        f"not in the directory you launch from (from here: {os.path.abspath(typed)})"
                    )
            for path in spec.writes:
                if not PurePosixPath(path).is_absolute():
                    config = _first_config(specs) if config is None else config
                    raise ConfigError(
                        f"{_key_holding(config, path, spec.stage)}={path!r}: use an absolute path; the "
                        f"{spec.stage} job starts in {spec.directory} and would write there, where no later stage "
                        f"looks (from here: {os.path.abspath(path)})"
                    )


def _first_config(specs: Sequence[JobSpec]) -> dict:
    """The resolved stage config the first job of a stage writes (its `<run.name>_hydra.yaml`)."""
    import yaml

    for spec in specs:
        for path, text in spec.files:
            if str(path).endswith("_hydra.yaml"):
                return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    return {}


def _key_holding(config, value: str, prefix: str) -> str:
    """The dotted key under which `config` holds `value` (the first found), or `<prefix>` when none does."""
    if isinstance(config, dict):
        for name, item in config.items():
            if item == value:
                return f"{prefix}.{name}"
            found = _key_holding(item, value, f"{prefix}.{name}")
            if found != f"{prefix}.{name}":
                return found
    return prefix


def _describe(item: Missing) -> str:
    spec, key, pattern = item
    what = "nothing matches" if glob.has_magic(pattern) else "no such file or directory"
    return (
        f"{key}={pattern!r}: {what} on this host, "
        f"and no earlier stage of this pipeline writes it ({spec.stage} job {spec.name})"
    )


FIX = (
    "fix the path, or add the stage that makes it (e.g. stages=[data_preparation,training]). Checked from this "
    "launch host: if the file exists only where the compute nodes mount it, set check_inputs=false "
    "(python3 -m nemo_launcher.launch.preflight checks data_dir from a compute node)"
)


def check_inputs(specs_by_stage: Sequence[Sequence[JobSpec]], dry_run: bool) -> None:
    """Raises ConfigError for the first missing input (then the first empty dataset) of a real run; a dry run
    warns about each instead."""
    missing = missing_inputs(specs_by_stage)
    empty = empty_datasets(specs_by_stage)
    if dry_run:
        for line in [_describe(item) for item in missing] + [_describe_empty(item) for item in empty]:
            print(f"Warning: a real run would refuse {line}", file=sys.stderr)
        return
    if missing:
        more = f" ({len(missing) - 1} more input(s) missing; a dry run lists them)" if len(missing) > 1 else ""
        raise ConfigError(f"{_describe(missing[0])}; {FIX}{more}")
    if empty:
        raise ConfigError(_describe_empty(empty[0]))
