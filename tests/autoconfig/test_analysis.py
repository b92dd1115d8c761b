"""The analysis job on a real search's manifest (a dry run of gpt3/0.126b), with each candidate's results written
by the writers the trainer and the candidate program use: a crash that left nothing, an out-of-memory failure, and
runs finishing in an order unrelated to their speed. Every run keeps its own numbers; the ranking is by measured
time per step; the optimal config dry-runs as a training config with the printed command."""

import contextlib
import csv
import dataclasses
import io
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from nemo_launcher.contract.autoconfig_search import MANIFEST_FILE, read_manifest, write_status
from nemo_launcher.contract.measured_steps import write_measured_steps
from nemo_launcher.jobs.autoconfig.analysis import analyse, spearman
from nemo_launcher.launch.resolvers import REPO_ROOT

from .support import run_autoconfig

LOGS = ("gpt3", "0.126b_80gb")


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    """A dry run of the seed's 0.126b search on 2 nodes, 5 candidates: its logs folder."""
    results = tmp_path_factory.mktemp("search") / "results"
    code, out, err = run_autoconfig(
        [
            "search_config=gpt3/0.126b",
            "run_inference_hp_search=False",
            f"base_results_dir={results}",
            "search_config.train_settings.num_nodes=2",
            "search_config.train_settings.limit_search_runs=5",
        ]
    )
    assert code == 0, err
    logs = results.joinpath(*LOGS)
    (logs / "search_output.txt").write_text(out)  # what the user saw, for the tests below
    return logs


def _measured(run, step_time: float) -> None:
    Path(run.run_dir).mkdir(parents=True, exist_ok=True)  # the trainer makes its log directory first
    write_measured_steps(
        run.run_dir,
        {
            "step": 50,
            "max_steps": 50,
            "step_time_s": step_time,
            "tokens_per_s": 1e5 / step_time,
            "world_size": 16,
            "peak_memory_gib": 10.0 + run.item,
            "peak_rss_gib": 2.0,
        },
    )
    write_status(run.run_dir, {"state": "finished", "exit_code": 0})


def _rows(logs: Path) -> list[dict]:
    with open(logs / "final_result" / "final_summary_2nodes.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def analysed(search):
    """The search's candidates ended: item 1 crashed before writing anything, item 3 ran out of memory, the others
    measured, finishing in an order unrelated to their speed; then the analysis ran. (logs, runs, its output)"""
    manifest_path = search / "training_logs" / MANIFEST_FILE
    runs = read_manifest(manifest_path).runs
    # Item 1 crashed before writing anything: its Slurm task log holds the traceback and nothing else.
    (search / "training_logs" / "log-nemo_megatron_autoconfig:gpt3_0.126b_search_77_1_attempt0.err").write_text(
        "Traceback (most recent call last):\n  ...\nRuntimeError: NCCL error in: init, unhandled system error\n"
    )
    # Item 3 ran out of memory on rank 5 (as the candidate program records it).
    write_status(runs[3].run_dir, {"state": "started"})
    write_status(
        runs[3].run_dir, {"rank": 5, "reason": "out of memory: CUDA out of memory"}, "candidate_failure.5.json"
    )
    # The others finish in reverse order of their speed: item 4 last but fastest.
    times = {0: 0.9, 2: 0.5, 4: 0.2}
    for item in (0, 2, 4):
        _measured(runs[item], times[item])
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert analyse(str(manifest_path)) == 0
    return search, runs, output.getvalue()


def test_each_run_keeps_its_own_numbers_and_the_ranking_is_by_measured_time(analysed):
    search, runs, out = analysed
    assert [run.item for run in runs] == list(range(5))
    rows = _rows(search)
    measured = [row for row in rows if row["status"] == "measured"]
    assert [row["name"] for row in measured] == [runs[4].name, runs[2].name, runs[0].name]
    assert [float(row["measured_step_time_s"]) for row in measured] == [0.2, 0.5, 0.9]
    assert [float(row["measured_peak_memory_gib"]) for row in measured] == [14.0, 12.0, 10.0]
    for row in measured:  # the prediction beside the measurement is the run's own
        run = next(run for run in runs if run.name == row["name"])
        assert float(row["predicted_step_time_s"]) == pytest.approx(run.predicted["step_time_s"], rel=1e-3)
    failed = {row["name"]: row["status"] for row in rows if row["status"] != "measured"}
    assert failed == {
        runs[1].name: "failed: error: RuntimeError: NCCL error in: init, unhandled system error",
        runs[3].name: "failed: out of memory: CUDA out of memory",
    }
    assert "Spearman rank correlation of predicted and measured step time:" in out
    optimal = search / "final_result" / "optimal_config_0.126b_2nodes.yaml"
    assert optimal.exists()
    assert f"tensor_model_parallel_size: {runs[4].layout['tp']}" in optimal.read_text()
    top = (search / "final_result" / "top_10_configs_2nodes.log").read_text()
    assert top.splitlines()[1].startswith(f"  1. {runs[4].name}: 0.2 s/step measured")


def _dry_run(command: str) -> subprocess.CompletedProcess:
    assert command.startswith("python3 main.py --config-dir ")
    env = dict(os.environ, NEMO_LAUNCHER_DEBUG="1")
    return subprocess.run(shlex.split(command), cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_the_printed_command_dry_runs_the_base_config(search):
    """`Base config: ... (train it with: python3 main.py ...)`, as the search printed it."""
    out = (search / "search_output.txt").read_text()
    command = out.split("(train it with: ", 1)[1].split(")\n", 1)[0]
    result = _dry_run(command)
    assert result.returncode == 0, result.stderr
    assert "gpt3_0.126b" in result.stdout


def test_the_printed_command_dry_runs_the_optimal_config(analysed):
    """The summary's `python3 main.py ...` line, run as printed (dry run) in the repository."""
    search, _, _ = analysed
    top = (search / "final_result" / "top_10_configs_2nodes.log").read_text()
    command = top.split("Train it with:\n", 1)[1].strip()
    result = _dry_run(command)
    assert result.returncode == 0, result.stderr
    assert "gpt3_0.126b" in result.stdout
    # No Pile here (nor, in a fresh clone, its tokenizer): the dry run says a real run would refuse its data, and
    # nothing else.
    warnings = result.stderr.strip().splitlines()
    assert warnings and all(line.startswith("Warning: a real run would refuse training.") for line in warnings)
    assert "training.run.preprocessed_dir=" in result.stderr


def test_no_measured_run_exits_1_and_says_why(tmp_path, search):
    manifest = read_manifest(search / "training_logs" / MANIFEST_FILE)
    fresh = tmp_path / "manifest.json"
    # The same search, but its runs point at empty directories: nothing started.
    text = manifest.to_json().replace(str(search / "training_logs"), str(tmp_path / "nowhere"))
    text = text.replace(manifest.final_result, str(tmp_path / "final_result"))
    fresh.write_text(text)
    assert analyse(str(fresh)) == 1
    report = (tmp_path / "final_result" / "top_10_configs_2nodes.log").read_text()
    assert "never started" in report and "No candidate measured a step" in report


def test_spearman_with_ties_and_reversals():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)
    assert spearman([1, 2], [1, 2]) is None


def test_train_optimal_config_chains_the_search_into_training(analysed, tmp_path, monkeypatch, capfd):
    """With train_optimal_config the analysis job runs the printed command itself (a dry run here, as the job's
    environment says NEMO_LAUNCHER_DEBUG=1)."""
    search, _, _ = analysed
    manifest = read_manifest(search / "training_logs" / MANIFEST_FILE)
    chained = tmp_path / MANIFEST_FILE
    chained.write_text(dataclasses.replace(manifest, train_optimal_config=True).to_json())
    monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
    assert analyse(str(chained)) == 0
    out = capfd.readouterr().out
    assert "Training the optimal config: " in out
    assert "Pipeline, dry run (NEMO_LAUNCHER_DEBUG): nothing was submitted" in out
