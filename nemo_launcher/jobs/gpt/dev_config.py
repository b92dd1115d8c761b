"""Resolved GPT training configs without the launcher, for tests, benchmarks and trying things by hand.

    path = write_training_config(out_dir / "gpt3_tiny_hydra.yaml", data_dir=..., results_dir=...,
                                 overrides=["trainer.max_steps=12", "model.tensor_model_parallel_size=2"])
    python3 -m nemo_launcher.jobs.gpt.train --config <path>

It merges conf/_family/gpt3_training.yaml with conf/training/gpt3/<size>.yaml the way the launcher's
defaults list does, under a `training` key beside `data_dir` and `base_results_dir` (the family file
interpolates `${training....}`), applies dotlist overrides relative to `training`, resolves, and writes
the `training` section: the same kind of file the launcher writes into a job directory.
"""
import math
from pathlib import Path
from typing import List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[3]
CONF_DIR = REPO_ROOT / "conf"


def _register_resolvers() -> None:
    # The launcher registers the same three names; configs only multiply and divide integers.
    from omegaconf import OmegaConf

    for name, function in {
        "multiply": lambda a, b: a * b,
        "divide_ceil": lambda a, b: math.ceil(a / b),
        "divide_floor": lambda a, b: a // b,
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)


def training_config(data_dir: Path, results_dir: Path, size: str = "tiny", overrides: Sequence[str] = ()) -> dict:
    from omegaconf import OmegaConf

    _register_resolvers()
    family = OmegaConf.load(CONF_DIR / "_family" / "gpt3_training.yaml")
    sized = OmegaConf.load(CONF_DIR / "training" / "gpt3" / f"{size}.yaml")
    sized.pop("defaults", None)
    root = OmegaConf.create({"data_dir": str(data_dir), "base_results_dir": str(results_dir)})
    root.training = OmegaConf.merge(family, sized)
    root.merge_with_dotlist([f"training.{item}" for item in overrides])
    OmegaConf.resolve(root)
    return OmegaConf.to_container(root.training)


def write_training_config(path: Path, data_dir: Path, results_dir: Path, size: str = "tiny",
                          overrides: Optional[List[str]] = None) -> Path:
    from omegaconf import OmegaConf

    section = training_config(data_dir, results_dir, size, overrides or ())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(section), path)
    return path
