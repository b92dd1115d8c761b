"""The training config of a run a downstream stage follows when no training config of its family is loaded.

    section = training_section_of_run("t5", "t5_220m")   # conf/training/t5/220m.yaml resolved, or None

`stages=[conversion] conversion=t5/convert_t5` loads GPT's default training, which launch/families.py drops: the
conversion then follows its family's default run by name (`${oc.select:training.run.name,t5_220m}`). Run names are
`<family>_<config name>`, so that run's config is conf/training/t5/220m.yaml; it is composed as main.py composes it
(Hydra's compose API, inside the running app or on its own) and kept only when its run.name is the name followed.
Only launch/model_sources.py asks, and only when neither the pipeline nor the disk knows the model.
"""

from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .resolvers import REPO_ROOT


def training_choice_of_run(family: str, run_name: str) -> str | None:
    """`<family>/<name>` of the config under conf/training/<family>/ whose run `<family>_<name>` is, or None."""
    prefix = f"{family}_"
    if not run_name.startswith(prefix):
        return None
    name = run_name[len(prefix) :]
    return f"{family}/{name}" if (REPO_ROOT / "conf" / "training" / family / f"{name}.yaml").is_file() else None


def training_section_of_run(family: str, run_name: str) -> tuple[str, dict[str, Any]] | None:
    """(choice, resolved training section) of the family's config that trains `run_name`, or None."""
    choice = training_choice_of_run(family, run_name)
    if choice is None:
        return None
    overrides = ["stages=[training]", f"training={choice}"]
    try:
        if GlobalHydra.instance().is_initialized():  # inside main.py's app: its own config search path
            cfg = compose(config_name="config", overrides=overrides)
        else:
            with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
                cfg = compose(config_name="config", overrides=overrides)
        section = OmegaConf.to_container(cfg.training, resolve=True)
    except (HydraException, OmegaConfBaseException):
        # A config that does not compose on its own says nothing about the model; the stage goes unchecked.
        return None
    if (section.get("run") or {}).get("name") != run_name:
        return None
    return choice, section
