"""The launcher's entry: turns a composed config into a submitted (or dry-run) pipeline, reporting user errors."""

import os
import sys
from collections.abc import Sequence

from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from .errors import LauncherError, WriteError


def run(cfg: DictConfig, choices, argv: Sequence[str]) -> int:
    from .aliases import canonical_choices
    from .pipeline import launch
    from .stages import STAGES

    try:
        _name_sweep_point(cfg, choices, argv)
        launch(cfg, canonical_choices(choices, STAGES), argv)
        return 0
    except LauncherError as error:
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR"):
            raise
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        # Before the submission began (composing, writing job directories): nothing is queued or running.
        print("Error: interrupted (Ctrl-C) before anything was submitted; nothing is queued", file=sys.stderr)
        return 130
    except OSError as error:
        # Every write of the launcher reports itself (writes.py); this is a read, or a write that slipped past.
        if os.environ.get("NEMO_LAUNCHER_FULL_ERROR"):
            raise
        where = f"{os.fsdecode(error.filename)}: " if error.filename is not None else ""
        print(f"Error: {where}{error.strerror or error} (NEMO_LAUNCHER_FULL_ERROR=1 shows where)", file=sys.stderr)
        return WriteError.exit_code
    except MissingMandatoryValue as error:
        print(
            f"Error: {error.full_key}='???': this value is mandatory: set it in the YAML or on the command line",
            file=sys.stderr,
        )
        return 2
    except OmegaConfBaseException as error:
        print(f"Error: {getattr(error, 'full_key', '') or 'config'}: {error.msg.splitlines()[0]}", file=sys.stderr)
        return 2


def _name_sweep_point(cfg: DictConfig, choices, argv: Sequence[str]) -> None:
    """In a `-m` sweep, gives this point its own run names; the first point checks the whole sweep first."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return  # single runs do not pay for the sweep machinery
    from .sweeps import check_points, current_sweep, name_point, remove_sweep_record

    sweep = current_sweep(argv, groups=list(choices))

    stages = [str(stage) for stage in cfg.get("stages") or []]
    if sweep.number == 0:
        try:
            check_points(sweep, stages)
        except LauncherError:
            remove_sweep_record()
            raise
    name_point(cfg, stages, sweep.suffix(list(HydraConfig.get().overrides.task)))
