"""tests/parsed_configs.py, which the test workers install: a conf/ file is read and built once while unchanged, every
load gets its own copy, other files load as before, and a composition is the same with or without it."""

from omegaconf import OmegaConf

from tests import parsed_configs
from tests.launch.conftest import CONF_DIR, compose_config


def _load(path):
    with open(path, encoding="utf-8") as stream:
        return OmegaConf.load(stream)


def test_a_conf_file_is_built_once_and_every_load_gets_its_own_copy():
    assert OmegaConf.load.reuses_parsed_files  # tests/conftest.py installed it in this process
    first, second = _load(f"{CONF_DIR}/config.yaml"), _load(f"{CONF_DIR}/config.yaml")
    assert first == second and first is not second
    first.cluster_type = "changed"
    first.defaults.pop()  # Hydra takes the defaults list out of a config it loads
    again = _load(f"{CONF_DIR}/config.yaml")
    assert again == second and again.cluster_type == "bcm"
    assert any(key[0].endswith("/conf/config.yaml") for key in parsed_configs._built)


def test_a_file_outside_conf_is_read_again_each_time(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("value: 1\n")
    assert _load(path).value == 1
    path.write_text("value: 2\n")  # same size, maybe the same modification time
    assert _load(path).value == 2
    assert not any(key[0].startswith(str(tmp_path)) for key in parsed_configs._built)


def test_a_composition_is_the_same_without_the_reuse(monkeypatch):
    overrides = ["stages=[training,conversion]", "training=t5/220m", "cluster_type=bcp"]
    reused, reused_choices = compose_config(overrides)
    monkeypatch.setattr(OmegaConf, "load", staticmethod(OmegaConf.load.real_load))
    plain, plain_choices = compose_config(overrides)
    assert OmegaConf.to_container(reused) == OmegaConf.to_container(plain) and reused_choices == plain_choices
