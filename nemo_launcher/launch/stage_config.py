"""The resolved config the launcher would write for one stage, without submitting anything: for tests,
benchmarks and running a job program by hand.

    path = write_stage_config(
        out_dir / "gpt3_tiny_hydra.yaml", "training", "gpt3/tiny", data_dir=..., base_results_dir=...,
        overrides=["trainer.max_steps=12", "model.tensor_model_parallel_size=2", "trainer.devices=2"],
    )
    python3 -m nemo_launcher.jobs.gpt.train --config <path>

It composes conf/config.yaml exactly as `python3 main.py stages=[<stage>] <stage>=<choice> ...` does (overrides are
relative to the stage's section), validates it as the launcher does (the stage's schema, the layout, the cluster),
and returns or writes the text the launcher would put into the job directory. So what a test feeds a job program
is what the launcher writes, never a second composition that can drift from it.
"""

from collections.abc import Sequence
from pathlib import Path

import yaml


def stage_config_text(
    stage: str, choice: str, data_dir, base_results_dir, overrides: Sequence[str] = (), settings: Sequence[str] = ()
) -> str:
    """The resolved YAML of `stage`; `settings` are top-level overrides (e.g. cluster.gpus_per_node=4)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from .fast_yaml import install_fast_yaml_loader
    from .pipeline import build_plan
    from .resolvers import REPO_ROOT, register_resolvers

    register_resolvers()
    install_fast_yaml_loader()
    words = [
        f"stages=[{stage}]",
        f"{stage}={choice}",
        f"data_dir={data_dir}",
        f"base_results_dir={base_results_dir}",
        "check_inputs=false",
        *settings,
        *(f"{stage}.{item}" for item in overrides),
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=words, return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    plan = build_plan(cfg, choices)
    (_, text), *_ = plan.jobs_by_stage[0][0].spec.files
    return text


def stage_config(
    stage: str, choice: str, data_dir, base_results_dir, overrides: Sequence[str] = (), settings: Sequence[str] = ()
) -> dict:
    return yaml.safe_load(stage_config_text(stage, choice, data_dir, base_results_dir, overrides, settings))


def write_stage_config(
    path,
    stage: str,
    choice: str,
    data_dir,
    base_results_dir,
    overrides: Sequence[str] = (),
    settings: Sequence[str] = (),
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stage_config_text(stage, choice, data_dir, base_results_dir, overrides, settings), encoding="utf-8")
    return path
