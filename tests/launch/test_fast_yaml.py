"""libyaml parsing (fast_yaml) gives exactly what OmegaConf's own loader gives, for every shipped config."""
import pytest
import yaml
from omegaconf import OmegaConf, _utils

from nemo_launcher.launch.fast_yaml import _fast_loader_class
from nemo_launcher.launch.resolvers import REPO_ROOT

CONFIGS = sorted(REPO_ROOT.glob("conf/**/*.yaml"))


def _original_loader():
    loader = _utils.get_yaml_loader()
    if getattr(_utils.get_yaml_loader, "fast", False):
        pytest.skip("the fast loader is already installed in this process")
    return loader


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_every_config_parses_identically():
    python_loader = _original_loader()
    fast_loader = _fast_loader_class(python_loader)
    assert CONFIGS
    for path in CONFIGS:
        text = path.read_text()
        assert yaml.load(text, Loader=fast_loader) == yaml.load(text, Loader=python_loader), path


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
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
