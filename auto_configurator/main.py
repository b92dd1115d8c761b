"""The AutoConfigurator: `python3 auto_configurator/main.py search_config=gpt3/5b` (NEMO_LAUNCHER_DEBUG=1: dry run).

Recommends a model size (search_config=<family>/unknown_size), writes a base training config, scores every layout
the seed's rules allow with the performance model, launches the fastest predicted ones as one job array and ranks
them by measured step time (docs/autoconfigurator.md). The work is nemo_launcher/launch/autoconfig/app.py.
"""

import os
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the launcher beside this folder

from nemo_launcher.launch.fast_yaml import install_fast_yaml_loader  # noqa: E402
from nemo_launcher.launch.resolvers import register_resolvers  # noqa: E402

register_resolvers()
install_fast_yaml_loader()
if not OmegaConf.has_resolver("autoconfig_root"):
    OmegaConf.register_new_resolver("autoconfig_root", lambda: os.path.dirname(os.path.abspath(__file__)))


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from nemo_launcher.launch.autoconfig.app import run

    code = run(cfg, sys.argv)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
