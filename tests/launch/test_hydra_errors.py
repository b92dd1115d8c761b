"""Hydra's own errors speak the launcher's language: one line naming the key, the value and the fix, exit 2, nothing
written, no traceback; HYDRA_FULL_ERROR=1 (or NEMO_LAUNCHER_FULL_ERROR=1) still shows Hydra's own report.

Each case runs main.py as a user types it: the translation happens around Hydra, in the launcher's entry point.
"""

import os
import subprocess
import sys

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT

# (overrides, words the one-line message holds)
CASES = [
    # A key that does not exist: the nearest keys of its section; `+` only where a new key is meaningful.
    (
        ["stages=[training]", "training=gpt3/126m", "training.model.nmu_layers=3"],
        ["training.model.nmu_layers=3: no such key under training.model", "did you mean training.model.num_layers?"],
    ),
    (
        ["stages=[training]", "training=t5/220m", "training.trainer.max_step=10"],
        ["training.trainer.max_step=10", "did you mean training.trainer.max_steps"],
    ),
    (
        ["stages=[evaluation]", "evaluation=t5/squad", "evaluation.model.vocab_fil=/x/vocab.txt"],
        ["evaluation.model.vocab_fil=/x/vocab.txt: no such key under evaluation.model", "keys under evaluation.model:"],
    ),
    (
        ["stages=[data_preparation]", "data_preparation=custom_dataset", "dataprepartion.raw_dataset_files=[/a]"],
        ["dataprepartion.raw_dataset_files=[/a]: no such key at the top level", "did you mean data_preparation?"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "cluster.partitoin=batch"],
        ["cluster.partitoin=batch", "did you mean cluster.partition?"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "training.model.num_layers.deep=1"],
        ["training.model.num_layers.deep=1", "training.model.num_layers is not a section"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "env_vars.MY_SETTING=1"],
        ["env_vars.MY_SETTING=1: env_vars takes new keys with a leading +: +env_vars.MY_SETTING=1"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "training.run.env_vars.MY_SETTING=1"],
        ["+training.run.env_vars.MY_SETTING=1"],
    ),
    # A comma Hydra reads as a sweep, outside -m.
    (
        ["stages=[training]", "training=gpt3/126m", "training.model.data.splits_string=99,1,0"],
        [
            "training.model.data.splits_string=99,1,0: Hydra reads an unquoted comma as a sweep",
            "training.model.data.splits_string='99,1,0'",
            "add -m",
        ],
    ),
    (
        ["stages=[data_preparation]", "data_preparation=mt5/download_mc4", "data_preparation.languages=cs,da"],
        ["data_preparation.languages='cs,da'"],
    ),
    # Values Hydra's grammar cannot read.
    (
        ["stages=[training]", "training=gpt3/126m", "training.run.name=a=b"],
        ["training.run.name=a=b: Hydra cannot read this value", "training.run.name='a=b'"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "training.run.name='gpt_run"],
        ["training.run.name='gpt_run: the quote that opens this value is never closed", "training.run.name='gpt_run'"],
    ),
    (
        ["stages=[training]", "training=gpt3/126m", "training.model.optim.betas=[0.9,0.95"],
        ["training.model.optim.betas=[0.9,0.95: Hydra cannot read this value"],
    ),
    # A file path where a config name belongs.
    (
        ["stages=[training]", "training=conf/training/gpt3/126m.yaml"],
        ["training='conf/training/gpt3/126m.yaml': a config group takes a config name", "training=gpt3/126m"],
    ),
    (
        ["stages=[fine_tuning]", "fine_tuning=/home/me/my_squad.yaml"],
        ["fine_tuning='/home/me/my_squad.yaml'", "conf/fine_tuning/<family>/<name>.yaml"],
    ),
]


def _main(args, tmp_path, **extra_env):
    env = dict(os.environ, NEMO_LAUNCHER_DEBUG="1", **extra_env)
    for name in ("HYDRA_FULL_ERROR", "NEMO_LAUNCHER_FULL_ERROR"):
        if name not in extra_env:
            env.pop(name, None)
    return subprocess.run(
        [sys.executable, "main.py", *args, f"base_results_dir={tmp_path / 'results'}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("overrides, words", CASES)
def test_hydra_error_is_one_launcher_line(overrides, words, tmp_path):
    result = _main(overrides, tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert not (tmp_path / "results").exists()


def test_the_full_error_variable_shows_hydras_own_report(tmp_path):
    result = _main(["stages=[training]", "training.model.nmu_layers=3"], tmp_path, HYDRA_FULL_ERROR="1")
    assert result.returncode == 1 and "Traceback" in result.stderr and "ConfigCompositionException" in result.stderr


def test_a_refused_sweep_leaves_nothing_behind(tmp_path):
    result = _main(["-m", "stages=[training]", "training=gpt3/126m", "training.model.num_layers=0,2"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "sweep point 0" in result.stderr and "training.model.num_layers=0" in result.stderr
    assert not (tmp_path / "results").exists(), sorted((tmp_path / "results").rglob("*"))


def test_a_refused_sweep_keeps_what_was_there(tmp_path):
    kept = tmp_path / "results" / "multirun" / "notes.txt"
    kept.parent.mkdir(parents=True)
    kept.write_text("mine\n")
    result = _main(["-m", "stages=[training]", "training=gpt3/126m", "training.model.num_layers=0,2"], tmp_path)
    assert result.returncode == 2
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "results").rglob("*")) == [
        kept.parent.relative_to(tmp_path),
        kept.relative_to(tmp_path),
    ]
