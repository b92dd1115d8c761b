"""Runs the AutoConfigurator in-process, as `python3 auto_configurator/main.py <overrides>` runs it.

code, out, err = run_autoconfig(["search_config=gpt3/unknown_size", ...], capsys)
"""

import contextlib
import io
import os

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from nemo_launcher.launch.resolvers import REPO_ROOT, register_resolvers

APP_DIR = REPO_ROOT / "auto_configurator"
CONF_DIR = APP_DIR / "conf"


def _register() -> None:
    register_resolvers()
    if not OmegaConf.has_resolver("autoconfig_root"):  # as auto_configurator/main.py registers it
        OmegaConf.register_new_resolver("autoconfig_root", lambda: str(APP_DIR))


def compose_autoconfig(overrides: list[str]):
    """The config auto_configurator/main.py gets, with Hydra's runtime set as hydra.main sets it."""
    _register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.search_config_value = str(cfg.search_config_value)  # resolved while Hydra's runtime is set
        del cfg["hydra"]
    return cfg


def run_autoconfig(overrides: list[str], capsys=None, debug: bool = True):
    """(exit code, stdout, stderr); without capsys (module fixtures) the output is captured here."""
    from nemo_launcher.launch.autoconfig.app import run

    previous = os.environ.get("NEMO_LAUNCHER_DEBUG")
    os.environ["NEMO_LAUNCHER_DEBUG"] = "1" if debug else ""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.ExitStack() as stack:
            if capsys is None:
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(err))
            code = run(compose_autoconfig(overrides), ["auto_configurator/main.py", *overrides])
    finally:
        if previous is None:
            os.environ.pop("NEMO_LAUNCHER_DEBUG", None)
        else:
            os.environ["NEMO_LAUNCHER_DEBUG"] = previous
    if capsys is None:
        return code, out.getvalue(), err.getvalue()
    captured = capsys.readouterr()
    return code, captured.out, captured.err
