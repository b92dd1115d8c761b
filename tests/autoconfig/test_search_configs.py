"""Every shipped search config is a test case: its dry run composes, sizes, binds its base config and its first
candidates with the training schema and renders the search's scripts (exit 0, nothing on stderr). The tiny CPU
search, which measures this machine first, runs in test_search_on_slurm.py."""

import pytest

from .support import CONF_DIR, run_autoconfig

SEARCH_CONFIGS = sorted(
    str(path.relative_to(CONF_DIR / "search_config").with_suffix(""))
    for path in (CONF_DIR / "search_config").rglob("*.yaml")
    if path.stem != "tiny"
)


def test_the_seed_names_and_the_reference_sizes_are_shipped():
    assert {"gpt3/5b", "gpt3/0.126b", "gpt3/unknown_size"} <= set(SEARCH_CONFIGS)
    assert {name.split("/")[0] for name in SEARCH_CONFIGS} == {"gpt3", "t5", "mt5", "bert"}
    assert len(SEARCH_CONFIGS) == 27


@pytest.mark.parametrize("search_config", SEARCH_CONFIGS)
def test_search_config_dry_runs(search_config, tmp_path, capsys):
    code, out, err = run_autoconfig(
        [
            f"search_config={search_config}",
            "run_inference_hp_search=False",
            f"base_results_dir={tmp_path}",
            "search_config.train_settings.limit_search_runs=2",
        ],
        capsys,
    )
    assert code == 0, err
    assert err == ""
    assert "Launching the 2 fastest predicted" in out and "Pipeline, dry run" in out
    assert len(list(tmp_path.rglob("base_cfg_*.yaml"))) == 2  # the seed's path and the one main.py reads


def test_a_bad_setting_is_one_line_and_writes_nothing(tmp_path, capsys):
    code, out, err = run_autoconfig(
        ["search_config=gpt3/5b", f"base_results_dir={tmp_path}", "search_config.train_settings.micro_batch_sizes=[0]"],
        capsys,
    )
    assert code == 2
    assert err == "Error: search_config.train_settings.micro_batch_sizes=0: must be a positive integer\n"
    assert not any(tmp_path.iterdir())
