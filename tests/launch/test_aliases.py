"""Config names a seed prints that live here under another name (conf/<group>/<alias>.yaml holding only the defaults
entry of its target): each composes exactly as its target and the launcher treats it as the target."""

import pytest
from omegaconf import OmegaConf

from nemo_launcher.launch.aliases import alias_target, canonical_choices
from nemo_launcher.launch.config_choices import configs_of, groups

from .conftest import CONF_DIR, compose_config

ALIASES = sorted(
    (group, name, alias_target(group, name))
    for group in groups(CONF_DIR)
    for name in configs_of(CONF_DIR, group)
    if alias_target(group, name) is not None
)


def test_the_seeds_spellings_are_aliases():
    found = {(group, name): target for group, name, target in ALIASES}
    assert found[("conversion", "convert_t5")] == "t5/convert_t5"
    assert found[("conversion", "convert_mt5")] == "mt5/convert_mt5"
    assert found[("data_preparation", "custom_dataset")] == "generic/custom_dataset"
    assert found[("training", "vit/vit_B_16")] == "vit/B_16"
    # A file that changes anything of its target is a config of its own (the seed's 256-px config, in epochs).
    assert ("training", "stable_diffusion/860m_res_256") not in found


@pytest.mark.parametrize("group, name, target", ALIASES)
def test_an_alias_composes_as_its_target(group, name, target):
    assert target in configs_of(CONF_DIR, group), f"{group}={name} stands for {target}, which does not exist"
    alias, alias_choices = compose_config([f"{group}={name}", f"stages=[{group}]"])
    real, real_choices = compose_config([f"{group}={target}", f"stages=[{group}]"])
    assert OmegaConf.to_container(alias[group]) == OmegaConf.to_container(real[group])
    assert canonical_choices(alias_choices, [group])[group] == target
