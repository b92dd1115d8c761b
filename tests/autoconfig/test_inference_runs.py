"""The GPT inference search run for real on a tiny GPT `.nemo` (tests/jobs/sft_support.py's tiny_nemo: random weights,
no training): `search_config=gpt3/tiny` with run_inference_hp_search=True measures TP 1/2 x batch 1/4, 16 prompt
tokens and 8 generated ones each, then writes final_output.csv. Here (cluster_type=interactive) one job runs the
settings one after another, forked from the warm interpreter (tests/jobs/warm_python.py); on the local Slurm they
are one array of fresh processes (batch 4 only), one at a time, and the analysis waits for the array with afterany."""

import csv
import json
import sys
from pathlib import Path

import pytest

from tests.jobs import warm_python
from tests.jobs.sft_support import tiny_bpe_files, tiny_nemo  # noqa: F401  (fixtures)

from .support import run_autoconfig
from .test_search_on_slurm import SLURM_CPU

OUTPUT_LEN = 8
GRID = {("1", "1"), ("1", "4"), ("2", "1"), ("2", "4")}  # (tp, batch_size)
# On Slurm each setting is a fresh job of fresh processes (a TP 2 one: its task, torchrun and two ranks): TP 1 and 2
# at batch 4 only, which keeps the test near a minute on the shared 2-core machine.
SLURM_GRID = {("1", "4"), ("2", "4")}


def _overrides(results: Path, nemo: str) -> list[str]:
    return [
        "search_config=gpt3/tiny",
        "run_training_hp_search=False",
        f"base_results_dir={results}",
        f"search_config.inference_settings.run.nemo_file={nemo}",
    ]


def _check_summary(folder: Path, grid: set) -> list[dict]:
    with open(folder / "final_summary" / "final_output.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["status"] for row in rows] == ["measured"] * len(grid), rows
    assert {(row["tp"], row["batch_size"]) for row in rows} == grid
    throughputs = [float(row["throughput_tokens_per_s"]) for row in rows]
    assert throughputs == sorted(throughputs, reverse=True)
    for row in rows:
        # Each setting's own record: every row generated OUTPUT_LEN tokens within the batch's latency.
        result = json.loads((folder / row["name"] / "inference_result.json").read_text())
        assert result["tp"] == int(row["tp"]) and result["batch_size"] == int(row["batch_size"])
        assert result["tokens_per_s"] == pytest.approx(result["batch_size"] * OUTPUT_LEN / result["latency_s"])
        assert 0 < result["first_token_latency_s"] < result["latency_s"]
    return rows


def test_tiny_inference_search_here(tmp_path, capsys, monkeypatch, tiny_nemo):  # noqa: F811
    # The interactive backend runs its scripts with this interpreter (NEMO_LAUNCHER_PYTHON): the warm stand-in.
    monkeypatch.setattr(sys, "executable", warm_python.interpreter())
    for name, value in warm_python.environment(warm_python.job_environment({})).items():
        monkeypatch.setenv(name, value)
    results = tmp_path / "results"
    code, out, err = run_autoconfig([*_overrides(results, tiny_nemo), "cluster_type=interactive"], capsys, debug=False)
    assert code == 0, err
    assert "Inference search: 4 settings in the grid, 4 run" in out
    rows = _check_summary(results / "gpt3" / "tiny" / "inference", GRID)
    quickest = min(rows, key=lambda row: float(row["latency_s"]))  # the best setting within the tightest budget
    (analysis_log,) = (results / "gpt3" / "tiny" / "inference" / "final_summary").glob("log-*.out")
    assert f"  within {quickest['latency_s']} s per batch: {quickest['name']} at " in analysis_log.read_text()
    assert "Warning" not in out + err


def test_tiny_inference_search_on_slurm(slurm_cluster, tmp_path, capsys, tiny_nemo):  # noqa: F811
    results = tmp_path / "results"
    batch_4 = "search_config.inference_settings.benchmark.batch_sizes=[4]"
    code, out, err = run_autoconfig([*_overrides(results, tiny_nemo), batch_4, *SLURM_CPU], capsys, debug=False)
    assert code == 0, err
    array, analysis = [line.split()[2] for line in out.splitlines() if line.startswith("inference_search ")]
    assert slurm_cluster.wait(analysis, timeout_s=600) == "COMPLETED"
    folder = results / "gpt3" / "tiny" / "inference"
    rows = _check_summary(folder, SLURM_GRID)
    # Each array task's log is its own: task i measured setting i.
    for item in range(len(SLURM_GRID)):
        (task_log,) = folder.glob(f"log-*_{array}_{item}_attempt0.out")
        assert f"setting {item}: " in task_log.read_text()
    print(
        f"\nInference search on Slurm, tokens/s by setting: {[(r['name'], r['throughput_tokens_per_s']) for r in rows]}"
    )


def test_next_token_greedy_top_k_and_top_p():
    import torch

    from nemo_launcher.jobs.autoconfig.inference_benchmark import next_tokens

    # Token probabilities 0.6, 0.3, 0.1 and two near zero, the same for 400 rows.
    logits = torch.tensor([[0.6, 0.3, 0.1, 1e-6, 1e-6]]).log().expand(400, 5)
    draws = torch.Generator().manual_seed(1234)
    assert set(next_tokens(logits, 0, 0.0, draws).tolist()) == {0}
    assert set(next_tokens(logits, 2, 0.0, draws).tolist()) == {0, 1}  # top-k: the two likeliest only
    assert set(next_tokens(logits, 0, 0.8, draws).tolist()) == {0, 1}  # top-p: 0.6 + 0.3 holds 0.8, the 0.1 goes
    assert set(next_tokens(logits, 0, 0.95, draws).tolist()) == {0, 1, 2}
    again = torch.Generator().manual_seed(1234)
    assert next_tokens(logits, 0, 0.0, again).tolist() == [0] * 400
    first, second = (next_tokens(logits, 4, 0.0, torch.Generator().manual_seed(7)) for _ in range(2))
    assert torch.equal(first, second)  # the same seed draws the same tokens: every TP rank picks alike
