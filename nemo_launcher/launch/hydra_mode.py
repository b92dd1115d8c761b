"""Hydra composes the whole config twice per run: once only to read `hydra.mode`, then for real. For the
launcher's configs that first composition is most of a dry run's own time, and it only ever finds the default
(no `hydra.mode` in conf/); so the launcher answers the question from the command line and the primary config
instead, and leaves Hydra's own probe in place whenever either of them mentions `hydra.mode`.
"""

import os

import yaml

from .cli import CONF_DIR, read_command_line


def _sets_mode(conf_dir: str, config_name: str) -> bool:
    """Whether the primary config, or conf/config.yaml that ours build on, sets hydra.mode."""
    for name in dict.fromkeys((config_name, "config")):
        path = os.path.join(conf_dir, f"{name}.yaml" if not name.endswith(".yaml") else name)
        try:
            with open(path, encoding="utf-8") as handle:
                document = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except (OSError, yaml.YAMLError):
            return True  # cannot tell: let Hydra look
        hydra = document.get("hydra") if isinstance(document, dict) else None
        if isinstance(hydra, dict) and "mode" in hydra:
            return True
    return False


def skip_mode_probe(argv, conf_dir: str = CONF_DIR) -> bool:
    """Makes Hydra's mode probe answer "not set" without composing, unless something may set hydra.mode.
    Returns whether the shortcut is in place."""
    options, overrides = read_command_line(list(argv[1:]))
    if "--config-dir" in options or "--config-path" in options or any("hydra.mode" in word for word in overrides):
        return False
    if _sets_mode(conf_dir, options.get("--config-name") or "config"):
        return False
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = _mode_not_set
    return True


def _mode_not_set(self, config_name, overrides):
    # Hydra then runs or sweeps as -m says, exactly as when its own probe finds no hydra.mode.
    return None
