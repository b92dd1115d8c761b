"""libyaml parsing (fast_yaml) gives exactly what OmegaConf's own loader gives, for every shipped config."""

import pytest
import yaml
from omegaconf import _utils

from nemo_launcher.launch.fast_yaml import _fast_loader_class
from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import INSTALL_FIX, skip_or_fail

CONFIGS = sorted(REPO_ROOT.glob("conf/**/*.yaml"))

# OmegaConf's own loader factory, taken when this module is collected: a test that later runs main.py
# in-process (which installs the fast loader) then cannot take the reference away from these tests.
_OMEGACONF_LOADER = None if getattr(_utils.get_yaml_loader, "fast", False) else _utils.get_yaml_loader


def _original_loader():
    if not yaml.__with_libyaml__:
        skip_or_fail("PyYAML was built without libyaml", f"PyYAML's manylinux wheel bundles it: {INSTALL_FIX}")
    if _OMEGACONF_LOADER is None:
        skip_or_fail(
            "the fast loader was installed before this module was collected (a conftest or a test "
            "module imported main.py)",
            "run main.py in a subprocess, as tests/launch/test_cli.py does",
        )
    return _OMEGACONF_LOADER()


def test_every_config_parses_identically():
    python_loader = _original_loader()
    fast_loader = _fast_loader_class(python_loader)
    assert CONFIGS
    for path in CONFIGS:
        text = path.read_text()
        assert yaml.load(text, Loader=fast_loader) == yaml.load(text, Loader=python_loader), path


@pytest.mark.parametrize("text", ["a: 1e-5\nb: 1.0e+3\nc: .5\nd: 2026-01-01\ne: 0x10\nf: yes\n", "a: 1\na: 2\n"])
def test_omegaconf_rules_are_kept(text):
    python_loader = _original_loader()
    fast_loader = _fast_loader_class(python_loader)
    try:
        expected = yaml.load(text, Loader=python_loader)
    except yaml.constructor.ConstructorError:
        with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
            yaml.load(text, Loader=fast_loader)
        return
    assert yaml.load(text, Loader=fast_loader) == expected
    assert isinstance(expected["a"], float) and isinstance(expected["d"], str)
