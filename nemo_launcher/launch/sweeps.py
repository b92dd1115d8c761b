"""`-m` sweeps: every point gets its own run names and directories, or the sweep is refused before its first
point is submitted.

    python3 main.py -m stages=[training,conversion] training=gpt3/126m training.model.micro_batch_size=1,2
      -> training runs gpt3_126m-micro_batch_size_1 and gpt3_126m-micro_batch_size_2, each in its own directory;
         conversion follows its training run as usual.

Naming: each value that a sweep varies (not a config-group choice, which picks its own run names) is appended
to the run name of every selected stage whose name does not already carry it: `-<key>_<value>` with the key's
last part and the value reduced to letters, digits, `.` and `-`. When that would make a name longer than
`MAX_SUFFIX` characters, points are numbered instead (`-p0`, `-p1`, ...). Before the first point is
submitted, every point is composed and checked: two points that would write the same job directory, or a
sweep over a pipeline that prepares data (all points would write the same data files), are refused.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError

MAX_SUFFIX = 60


@dataclass(frozen=True)
class Sweep:
    number: int  # this point's index in the sweep (hydra.job.num)
    config_name: str  # the primary config (config, quickstart, ...)
    points: tuple[tuple[str, ...], ...]  # every point's overrides, in the order Hydra runs them
    swept_keys: tuple[str, ...]  # keys whose value varies between points (config groups excluded)

    def suffix(self, overrides: Sequence[str]) -> str:
        """The name suffix of the point with these overrides ('' when nothing but config groups varies)."""
        if not self.swept_keys:
            return ""
        if max(len(_slug(point, self.swept_keys)) for point in self.points) > MAX_SUFFIX:
            return f"p{self.points.index(tuple(overrides))}"
        return _slug(overrides, self.swept_keys)


def current_sweep(argv: Sequence[str], groups: Sequence[str]) -> Sweep | None:
    """The sweep this process runs a point of, or None outside `-m`."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydra = HydraConfig.get()
    parsed = OverridesParser.create().parse_overrides(get_args_parser().parse_args(list(argv[1:])).overrides)
    points = tuple(tuple(point) for batch in BasicSweeper.split_arguments(parsed, None) for point in batch)
    swept = tuple(o.key_or_group for o in parsed if o.is_sweep_override() and o.key_or_group not in groups)
    return Sweep(hydra.job.num, hydra.job.config_name, points, swept)


def _values(overrides: Sequence[str]) -> dict[str, str]:
    return {word.split("=", 1)[0].lstrip("+~"): word.split("=", 1)[1] for word in overrides if "=" in word}


def _slug(overrides: Sequence[str], keys: Sequence[str]) -> str:
    values = _values(overrides)
    leaves = [key.rsplit(".", 1)[-1] for key in keys]
    parts = []
    for key, leaf in zip(keys, leaves):
        label = leaf if leaves.count(leaf) == 1 else key.replace(".", "_")
        value = re.sub(r"[^A-Za-z0-9.-]+", "_", values.get(key, "")).strip("_") or "null"
        parts.append(f"{label}_{value}")
    return "-".join(parts)


def name_point(cfg: DictConfig, stages: Sequence[str], suffix: str) -> None:
    """Appends `-<suffix>` to the run name of each selected stage whose resolved name lacks it. Downstream stages
    usually derive their names from the training run's, and then already carry it."""
    if not suffix:
        return
    for stage in stages:
        name = OmegaConf.select(cfg, f"{stage}.run.name", throw_on_missing=False)
        if isinstance(name, str) and suffix not in name:
            OmegaConf.update(cfg, f"{stage}.run.name", f"{name}-{suffix}", merge=False)


def _written_places(cfg: DictConfig, plan) -> dict[str, str]:
    """Where a point writes: each job directory and, for trainers, the checkpoint directory."""
    places = {}
    for jobs in plan.jobs_by_stage:
        for job in jobs:
            places[f"{job.spec.stage} job directory"] = str(job.spec.directory)
            log_dir = OmegaConf.select(cfg, f"{job.spec.stage}.exp_manager.explicit_log_dir", default=None)
            if log_dir is not None:
                places[f"{job.spec.stage}.exp_manager.explicit_log_dir"] = str(log_dir)
    return places


def check_points(sweep: Sweep, stages: Sequence[str]) -> None:
    """Composes and validates every point as Hydra will run it, before the first is submitted: a sweep with one
    bad point, or with two points that would write the same directory, submits nothing."""
    if len(sweep.points) < 2:
        return
    if "data_preparation" in stages:
        raise ConfigError(
            f"stages={list(stages)!r}: a sweep of {len(sweep.points)} points would prepare the same data files "
            "once per point; run stages=[data_preparation] once, then sweep the later stages"
        )
    from hydra import compose
    from omegaconf import open_dict

    from .errors import LauncherError
    from .pipeline import build_plan

    seen: dict[str, tuple[int, str]] = {}
    for number, point in enumerate(sweep.points):
        cfg = compose(config_name=sweep.config_name, overrides=list(point), return_hydra_config=True)
        choices = dict(cfg.hydra.runtime.choices)
        with open_dict(cfg):
            del cfg["hydra"]
        point_stages = [str(s) for s in cfg.get("stages") or []]
        name_point(cfg, point_stages, sweep.suffix(point))
        try:
            plan = build_plan(cfg, choices)
        except LauncherError as error:
            raise ConfigError(f"sweep point {number} ({' '.join(point)}): {error}") from None
        for what, path in _written_places(cfg, plan).items():
            if path in seen and seen[path][0] != number:
                other, _ = seen[path]
                raise ConfigError(
                    f"{what}={path!r}: sweep points {other} ({' '.join(sweep.points[other])}) and {number} "
                    f"({' '.join(point)}) would both write here; make the directory follow the run name "
                    "(e.g. ${base_results_dir}/${.name}) or sweep values that change it"
                )
            seen[path] = (number, what)


def remove_sweep_record() -> None:
    """After a refused sweep: removes what Hydra wrote before the first point ran (its multirun.yaml and the
    point's empty folder under hydra.sweep.dir, then any folder that leaves empty up to base_results_dir), so
    a refusal leaves nothing behind. Folders holding anything else stay."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    sweep_dir = Path(hydra.sweep.dir)
    (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
    folder = Path(hydra.runtime.output_dir)
    related = (sweep_dir, *sweep_dir.parents)  # the sweep folder and those above it, up to the root
    while folder != folder.parent and (folder in related or sweep_dir in folder.parents):
        try:
            folder.rmdir()  # only an empty folder goes
        except OSError:
            return
        folder = folder.parent
