"""The test workers compose the launcher's configs thousands of times (every in-process `main.py`, see
tests/launch/conftest.py), and Hydra reads and parses every YAML file of a composition again each time: about a
quarter of a composition's CPU, and building the config from what it parsed another third. `install()` lets
OmegaConf reuse the config it built from a file of the repository's conf/ folder while the file is unchanged (same
size and modification time): each load returns a deep copy of it (half the CPU of building it again), so no
composition sees another's objects. Files anywhere else (the configs tests write) load as before."""

import copy
import os

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import get_yaml_loader

from nemo_launcher.launch.resolvers import REPO_ROOT

CONF_DIR = os.path.realpath(REPO_ROOT / "conf")

_built = {}  # (path, size, mtime in ns) -> the config OmegaConf built from the file, never handed out itself


def _reusing_load(real_load):
    def load(file_):
        name = getattr(file_, "name", None)
        if not isinstance(name, str) or not hasattr(file_, "fileno"):
            return real_load(file_)
        path = os.path.realpath(name)
        if not path.startswith(CONF_DIR + os.sep):
            return real_load(file_)
        stat = os.fstat(file_.fileno())
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in _built:
            contents = yaml.load(file_, Loader=get_yaml_loader())
            if contents is not None and not isinstance(contents, (list, dict, str)):
                raise OSError(f"Invalid loaded object type: {type(contents).__name__}")  # as OmegaConf.load says
            _built[key] = OmegaConf.create() if contents is None else OmegaConf.create(contents)
        return copy.deepcopy(_built[key])

    load.reuses_parsed_files = True
    load.real_load = real_load
    return load


def install() -> None:
    """Idempotent; for this process (a test worker) only."""
    if not getattr(OmegaConf.load, "reuses_parsed_files", False):
        OmegaConf.load = staticmethod(_reusing_load(OmegaConf.load))
