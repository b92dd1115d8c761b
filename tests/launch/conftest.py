"""Fixtures for launch-side tests: compose configs in-process (no subprocess per test) and run the launcher."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from nemo_launcher.launch.app import run
from nemo_launcher.launch.resolvers import REPO_ROOT, register_resolvers

CONF_DIR = str(REPO_ROOT / "conf")
register_resolvers()


def compose_config(overrides: list[str], config_name: str = "config"):
    """Composes like `python3 main.py <overrides>`; returns (cfg, choices).

    Most tests are about something other than input files and name data that does not exist here, so the input
    check is off unless the overrides set check_inputs (tests/launch/test_inputs.py turns it on)."""
    if not any(str(o).startswith("check_inputs=") for o in overrides):
        overrides = [*overrides, "check_inputs=false"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def run_launcher(overrides: list[str], results: Path, config_name: str = "config") -> int:
    """`python3 main.py --config-name=<config_name> base_results_dir=<results> <overrides>`, in-process; returns
    its exit code."""
    argv = ["main.py", f"base_results_dir={results}", *overrides]
    cfg, choices = compose_config(argv[1:], config_name)
    return run(cfg, choices, argv)


@pytest.fixture
def launch(tmp_path, monkeypatch, capsys):
    """Runs the launcher in-process with results under tmp_path; returns (exit code, stdout, stderr)."""

    def _launch(overrides: list[str], debug: bool = True, results: Path | None = None, config_name: str = "config"):
        results = results or tmp_path / "results"
        if debug:
            monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
        else:
            monkeypatch.delenv("NEMO_LAUNCHER_DEBUG", raising=False)
        code = run_launcher(overrides, results, config_name)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _launch


@pytest.fixture(autouse=True)
def _no_inherited_debug(monkeypatch):
    monkeypatch.delenv("NEMO_LAUNCHER_DEBUG", raising=False)
    monkeypatch.delenv("NEMO_LAUNCHER_FULL_ERROR", raising=False)


@pytest.fixture(scope="session")
def tiny_pile_data(tmp_path_factory) -> Path:
    """A data_dir that `data_preparation=gpt3/tiny_pile` filled here (interactive): GPT-2's files and the tiny Pile's
    three preprocessed shards. The Slurm training tests share it and only read it (the sweep test checks that)."""
    from tests.jobs.pipeline_support import prepare_data

    return prepare_data("gpt3/tiny_pile", tmp_path_factory.mktemp("tiny_pile"))


@pytest.fixture(scope="session")
def gpt_slurm_pipeline(slurm_cluster, tmp_path_factory):
    """The tiny GPT pipeline (data preparation to export, 10 training steps on two nodes), run once per session on
    the real Slurm; a tests.launch.slurm_pipelines.SlurmRun whose jobs have all ended."""
    from .slurm_pipelines import gpt_pipeline  # it imports test modules, which import this conftest

    return gpt_pipeline(slurm_cluster, tmp_path_factory.mktemp("gpt_slurm_pipeline"))


@pytest.fixture(scope="session")
def t5_slurm_pipeline(slurm_cluster, tmp_path_factory):
    """The T5 quick start's pipeline (10 training steps on two nodes, 20 fine-tuning steps), run once per session on
    the real Slurm; a tests.launch.slurm_pipelines.SlurmRun whose jobs have all ended."""
    from .slurm_pipelines import t5_pipeline  # it imports test modules, which import this conftest

    return t5_pipeline(slurm_cluster, tmp_path_factory.mktemp("t5_slurm_pipeline"))


def plan_rows(out: str):
    """The rows of the plan table the launcher prints, split on whitespace. Slurm plans (and dry runs):
    stage, job, id, dependency, nodes, gpus/node, time, array, script, log; interactive and bcp plans have no
    id and dependency columns."""
    lines = out.split("Pipeline, ", 1)[1].splitlines()[2:]
    return [line.split() for line in lines[: lines.index("")]]
