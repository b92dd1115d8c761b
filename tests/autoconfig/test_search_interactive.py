"""The tiny GPT search run here (cluster_type=interactive), as the seed's BCP search runs in its NGC job: one job runs
the candidates one after another, each through torchrun, then the analysis. Two candidates of 4 steps, their
processes forked from the warm interpreter (tests/jobs/warm_python.py), keep it short; test_search_on_slurm.py runs
the full six on Slurm with fresh processes."""

import csv
import sys

from tests.jobs import warm_python

from .support import run_autoconfig


def test_tiny_search_here(tmp_path, capsys, monkeypatch, tiny_search_data):
    # The interactive backend runs its scripts with this interpreter (NEMO_LAUNCHER_PYTHON): the warm stand-in.
    monkeypatch.setattr(sys, "executable", warm_python.interpreter())
    for name, value in warm_python.environment(warm_python.job_environment({})).items():
        monkeypatch.setenv(name, value)
    results = tmp_path / "results"
    code, out, err = run_autoconfig(
        [
            "search_config=gpt3/tiny",
            "cluster_type=interactive",
            "run_inference_hp_search=False",
            f"base_results_dir={results}",
            f"data_dir={tiny_search_data}",
            "search_config.train_settings.limit_search_runs=2",
            "search_config.train_settings.max_steps_per_run=4",
        ],
        capsys,
        debug=False,
    )
    assert code == 0, err
    final = results / "gpt3" / "tiny" / "final_result"
    with open(final / "final_summary_1nodes.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["status"] for row in rows] == ["measured", "measured"]
    assert [int(row["steps_measured"]) for row in rows] == [4, 4]
    assert float(rows[0]["measured_step_time_s"]) <= float(rows[1]["measured_step_time_s"])
    assert (final / "optimal_config_0.00333b_1nodes.yaml").exists()
    assert "Running training_search job" in out
    assert "Train it with:" in (final / "top_3_configs_1nodes.log").read_text()
