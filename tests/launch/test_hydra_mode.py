"""The launcher skips Hydra's extra composition that only reads hydra.mode, unless something may set it."""

import os
import subprocess
import sys

import pytest
from hydra._internal.hydra import Hydra

from nemo_launcher.launch.hydra_mode import _mode_not_set, skip_mode_probe
from nemo_launcher.launch.resolvers import REPO_ROOT


@pytest.fixture
def original_get_mode(monkeypatch):
    monkeypatch.setattr(Hydra, "get_mode", Hydra.get_mode)  # restored after the test
    return Hydra.get_mode


def test_shortcut_only_when_nothing_can_set_the_mode(original_get_mode, tmp_path):
    assert skip_mode_probe(["main.py", "stages=[training]"]) and Hydra.get_mode is _mode_not_set
    Hydra.get_mode = original_get_mode
    assert not skip_mode_probe(["main.py", "hydra.mode=MULTIRUN"]) and Hydra.get_mode is original_get_mode
    assert not skip_mode_probe(["main.py", "--config-dir", str(tmp_path)])
    (tmp_path / "config.yaml").write_text("stages: [training]\n")
    (tmp_path / "mine.yaml").write_text("defaults:\n  - config\nhydra:\n  mode: MULTIRUN\n")
    assert not skip_mode_probe(["main.py", "--config-name=mine"], conf_dir=str(tmp_path))
    assert skip_mode_probe(["main.py"], conf_dir=str(tmp_path))


def test_runs_and_sweeps_behave_as_without_the_shortcut(tmp_path):
    def dry_run(*args):
        flags = [a for a in args if a.startswith("-")]
        result = subprocess.run(
            [
                sys.executable,
                "main.py",
                *flags,
                "stages=[training]",
                "training=gpt3/126m",
                f"base_results_dir={tmp_path}",
                *(a for a in args if a not in flags),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            env=dict(os.environ, NEMO_LAUNCHER_DEBUG="1"),
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.count("Pipeline, ")

    assert dry_run() == 1
    assert dry_run("-m", "training.model.micro_batch_size=1,2") == 2
    assert dry_run("hydra.mode=MULTIRUN", "training.model.micro_batch_size=1,2") == 2
