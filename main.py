"""Launch a pipeline: `python3 main.py stages=[training] training=gpt3/5b` (NEMO_LAUNCHER_DEBUG=1 for a dry run)."""

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from nemo_launcher.launch.cli import check_command_line
from nemo_launcher.launch.fast_yaml import install_fast_yaml_loader
from nemo_launcher.launch.hydra_errors import launcher_errors
from nemo_launcher.launch.hydra_mode import skip_mode_probe
from nemo_launcher.launch.resolvers import register_resolvers

register_resolvers()
install_fast_yaml_loader()


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from nemo_launcher.launch.app import run

    code = run(cfg, dict(HydraConfig.get().runtime.choices), sys.argv)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    check_command_line(sys.argv)
    skip_mode_probe(sys.argv)
    with launcher_errors():
        main()
