"""Settings every stage and backend shares, read once from the top level of the composed config."""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from .backends import BACKENDS
from .cluster_settings import check_cluster
from .container_image import check_container_file, pyxis_image
from .errors import config_error
from .secrets import refuse_secret_values, secret_files

CLUSTER_TYPES = tuple(BACKENDS)
_TRUE_WORDS = ("1", "true", "t", "yes", "y")


def debug_requested(environ=os.environ) -> bool:
    """NEMO_LAUNCHER_DEBUG=1/true/True makes a dry run: everything but submitting or running."""
    return environ.get("NEMO_LAUNCHER_DEBUG", "").strip().lower() in _TRUE_WORDS


@dataclass(frozen=True)
class LaunchContext:
    cluster_type: str
    launcher_scripts_path: Path
    data_dir: Path
    base_results_dir: Path
    container: str | None  # as pyxis reads it (container_image.py): a registry image with its `#`, or a file
    mounts: tuple[str, ...]  # "src:dst" pairs, always including the three paths above
    env: tuple[tuple[str, str], ...]  # global env_vars without nulls, in config order
    cluster: dict  # the resolved `cluster` group (Slurm settings)
    # NAME -> file whose first line is the value, read on the node when the job starts (secret_files and
    # wandb_api_key_file); values never reach a script.
    secret_files: tuple[tuple[str, str], ...]
    preflight: bool
    check_inputs: bool  # refuse missing input files (data, tokenizer, checkpoints) before submitting
    debug: bool
    # Refuse a training-like job the performance model predicts will not fit in its GPUs' memory (predictions.py).
    memory_check: bool = True


MOUNT_FORM = "each entry is /abs/path, /src:/dst or /src:/dst:ro|rw, with no commas"
_MOUNT_FLAGS = ("ro", "rw")


def _mount(key: str, entry: str) -> str:
    """One container_mounts entry as pyxis's `src:dst[:flags]`. Pyxis splits the list on commas and each entry
    on colons, so a comma would silently make two mounts and a stray colon a wrong one."""
    parts = entry.split(":")
    paths, flags = parts[:2], parts[2:]
    well_formed = (
        "," not in entry
        and len(parts) <= 3
        and all(path.startswith("/") for path in paths)
        and all(flag in _MOUNT_FLAGS for flag in flags)
    )
    if not well_formed:
        raise config_error(key, entry, MOUNT_FORM)
    return entry if len(parts) > 1 else f"{entry}:{entry}"


def _mounts(raw, preset, fixed_paths, container: bool) -> tuple[str, ...]:
    if not isinstance(raw, (list, ListConfig)):
        raise config_error("container_mounts", raw, "must be a list, e.g. container_mounts=[/data,/lustre:/mnt/lustre]")
    mounts = []
    for key, path in fixed_paths.items():
        if container and ("," in path or ":" in path):
            raise config_error(
                key,
                path,
                "is mounted into the container, where pyxis splits mounts on ',' and ':'; use a path without them",
            )
        mounts.append(f"{path}:{path}")
    entries = [("container_mounts", entry) for entry in raw] + [
        ("env_preset.container_mounts", entry) for entry in preset
    ]
    for key, entry in entries:
        if entry is None:
            continue
        mount = _mount(key, str(entry))
        if mount not in mounts:
            mounts.append(mount)
    return tuple(mounts)


def _merged_env(preset, user) -> tuple[tuple[str, str], ...]:
    preset_pairs, user_pairs = _env(preset, "env_preset.env_vars"), _env(user)
    refuse_secret_values(preset_pairs, "env_preset.env_vars")
    refuse_secret_values(user_pairs, "env_vars")
    merged = dict(preset_pairs)
    merged.update(user_pairs)
    return tuple(merged.items())


def _env(raw, key: str = "env_vars") -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (dict, DictConfig)):
        raise config_error(key, raw, "must be a mapping of NAME: value")
    pairs = []
    for name, value in raw.items():
        if value is None:
            continue
        if not str(name).replace("_", "a").isalnum() or str(name)[0].isdigit():
            raise config_error(f"{key}.{name}", value, "environment variable names are letters, digits and _")
        if isinstance(value, bool):
            value = int(value)
        pairs.append((str(name), str(value)))
    return tuple(pairs)


NUMA_CHOICES = {
    "mode": ("all", "single", "single_unique", "unique_interleaved", "unique_contiguous"),
    "scope": ("node", "socket"),
    "cores": ("all_logical", "single_logical"),
}


def _numa_env(raw) -> tuple[tuple[str, str], ...]:
    """The numa_mapping settings travel to the job programs as JSON in one environment variable."""
    if raw is None:
        return ()
    settings = OmegaConf.to_container(raw, resolve=True) if isinstance(raw, DictConfig) else dict(raw)
    if not settings.get("enable"):
        return ()
    for key, choices in NUMA_CHOICES.items():
        if key in settings and settings[key] not in choices:
            raise config_error(f"numa_mapping.{key}", settings[key], f"choose one of {', '.join(choices)}")
    return (("NEMO_LAUNCHER_NUMA_MAPPING", json.dumps(settings, sort_keys=True, separators=(",", ":"))),)


# The top-level settings the launcher reads. Each is resolved on its own, so a `???` left in one of them is
# refused by name, while the config groups of stages that do not run are never resolved at all.
_SETTINGS = (
    "cluster_type",
    "launcher_scripts_path",
    "data_dir",
    "base_results_dir",
    "container",
    "container_mounts",
    "env_vars",
    "numa_mapping",
    "wandb_api_key_file",
    "secret_files",
    "preflight",
    "cluster",
    "env_preset",
    "check_inputs",
    "memory_check",
)


def _resolved_settings(cfg: DictConfig) -> dict[str, Any]:
    settings = {}
    for key in _SETTINGS:
        try:
            value = OmegaConf.select(cfg, key, throw_on_missing=True)
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as error:
            full_key = getattr(error, "full_key", None) or key
            full_key = full_key if full_key.startswith(key) else f"{key}.{full_key}"
            raise config_error(
                full_key, "???", "this value is mandatory: set it in the YAML or on the command line"
            ) from None
        settings[key] = value
    return settings


def read_context(cfg: DictConfig, environ=os.environ) -> LaunchContext:
    settings = _resolved_settings(cfg)
    cluster_type = settings["cluster_type"]
    if cluster_type not in CLUSTER_TYPES:
        raise config_error("cluster_type", cluster_type, f"choose one of {', '.join(CLUSTER_TYPES)}")
    paths = {key: Path(str(settings[key])) for key in ("launcher_scripts_path", "data_dir", "base_results_dir")}
    for key, path in paths.items():
        if not path.is_absolute():
            raise config_error(
                key, str(path), "use an absolute path; compute nodes do not share your working directory"
            )
    cluster = settings["cluster"] or {}
    check_cluster(cluster)
    # A cloud preset (conf/env_preset/) supplies defaults: the user's non-null env_vars win, its mounts are added.
    preset = settings["env_preset"] or {}
    container = pyxis_image(str(settings["container"])) if settings["container"] else None
    debug = debug_requested(environ)
    if container and settings["check_inputs"] is not False:
        check_container_file(container, dry_run=debug)
    return LaunchContext(
        cluster_type=cluster_type,
        launcher_scripts_path=paths["launcher_scripts_path"],
        data_dir=paths["data_dir"],
        base_results_dir=paths["base_results_dir"],
        container=container,
        mounts=_mounts(
            settings["container_mounts"] if "container_mounts" in cfg else [],
            preset.get("container_mounts") or [],
            {key: str(path) for key, path in paths.items()},
            container=bool(container),
        ),
        env=_merged_env(preset.get("env_vars"), settings["env_vars"]) + _numa_env(settings["numa_mapping"]),
        cluster=cluster,
        secret_files=tuple(secret_files(settings["secret_files"], settings["wandb_api_key_file"]).items()),
        preflight=bool(settings["preflight"]),
        check_inputs=settings["check_inputs"] is not False,
        debug=debug,
        memory_check=settings["memory_check"] is not False,
    )
