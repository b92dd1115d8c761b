"""conf/env_preset: the cloud settings as a config choice, kept equal to what the validation tools use."""

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "conf" / "env_preset"
CLOUDS = ("aws", "azure", "oci")


def _exports(env_sh: Path) -> dict:
    """`export NAME=value` lines of a cloud's env.sh (they are plain assignments by design)."""
    found = {}
    for line in env_sh.read_text().splitlines():
        match = re.fullmatch(r"export ([A-Z_][A-Z0-9_]*)=(\S+)", line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _compose_preset(name: str):
    """Composes the preset alone, as the `env_preset` defaults entry of conf/config.yaml would."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(overrides=[f"+env_preset={name}", f"+launcher_scripts_path={REPO}"])
    GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=True)["env_preset"]


def test_every_cloud_folder_has_a_preset_and_nothing_else_does():
    assert sorted(p.stem for p in PRESETS.glob("*.yaml")) == sorted(("none", *CLOUDS))


def test_none_preset_changes_nothing():
    assert _compose_preset("none") == {"env_vars": {}, "container_mounts": []}


@pytest.mark.parametrize("cloud", CLOUDS)
def test_preset_matches_the_validation_settings(cloud):
    preset = _compose_preset(cloud)
    assert set(preset) == {"env_vars", "container_mounts"}
    env = {name: str(value) for name, value in preset["env_vars"].items()}
    topology = env.pop("NCCL_TOPO_FILE", None)
    # What training jobs get is what cluster_validation.sh measured with.
    assert env == _exports(REPO / "csp_tools" / cloud / "env.sh")
    if (REPO / "csp_tools" / cloud / "topo.xml").exists():
        assert topology == "/nccl/topo.xml"
        assert preset["container_mounts"] == [f"{REPO}/csp_tools/{cloud}:/nccl"]
    else:
        assert topology is None
        assert preset["container_mounts"] == []


def test_seed_values_are_kept():
    # Seed §4.3: the Azure and AWS values users were told to paste into config.yaml.
    azure = _compose_preset("azure")["env_vars"]
    assert azure == {
        "UCX_IB_PCI_RELAXED_ORDERING": "auto",
        "NCCL_IB_PCI_RELAXED_ORDERING": 2,
        "NCCL_IB_TIMEOUT": 22,
        "NCCL_DEBUG": "INFO",
        "NCCL_TOPO_FILE": "/nccl/topo.xml",
    }
    assert _compose_preset("aws")["env_vars"]["NCCL_PROTO"] == "simple"
