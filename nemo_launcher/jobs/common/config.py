"""The resolved stage config a job program is started with, read from the file the launcher wrote.

    path = config_path_from_argv(sys.argv[1:])          # --config <job dir>/<run.name>_hydra.yaml
    section = load_resolved_config(path)                  # plain dict, no ${...} left
    cfg = TrainingConfig.from_dict(section)               # the schema the launcher bound before submitting

Schemas and `bind` live in `nemo_launcher.contract` (standard library only), shared with the launcher, so a
job never refuses what the launcher accepted.
"""

import argparse
import os
from pathlib import Path
from typing import Any

from nemo_launcher.contract.binding import JobConfigError, bind  # noqa: F401  (job programs import them from here)
from nemo_launcher.contract.job_start_values import resolve_job_start_values


def config_path_from_argv(argv: list[str] | None, prog: str | None = None) -> Path:
    parser = argparse.ArgumentParser(prog=prog, description="Runs one job from a resolved stage config.")
    parser.add_argument("--config", required=True, type=Path, help="the <run.name>_hydra.yaml the launcher wrote")
    return parser.parse_args(argv).config


def load_resolved_config(path: Path) -> dict[str, Any]:
    """Reads the YAML with OmegaConf (so `1e-3` is a float, as the launcher meant it) into plain containers."""
    from omegaconf import OmegaConf

    path = Path(path)
    if not path.is_file():
        raise JobConfigError(f"--config {path}: no such file")
    conf = OmegaConf.load(path)
    missing = sorted(OmegaConf.missing_keys(conf))
    if missing:
        raise JobConfigError(f"{path}: mandatory value missing (???) for {', '.join(missing)}")
    # The launcher resolves every interpolation before writing; one left means the file was hand-made.
    data = OmegaConf.to_container(conf, resolve=False)
    leftover = _find_interpolations(data, "")
    if leftover:
        raise JobConfigError(
            f"{path}: unresolved interpolation at {leftover[0][0]} = {leftover[0][1]!r}; "
            "job configs must be fully resolved (the launcher writes them so)"
        )
    if not isinstance(data, dict):
        raise JobConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    # A node count the launcher left to the job start (`$NGC_ARRAY_SIZE` on BCP) becomes the number it holds here,
    # before the schema binds it and checks every rule that needs it.
    return resolve_job_start_values(data, os.environ)


def _find_interpolations(value: Any, key: str) -> list[tuple]:
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _find_interpolations(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _find_interpolations(v, f"{key}[{i}]")]
    if isinstance(value, str) and "${" in value:
        return [(key, value)]
    return []
