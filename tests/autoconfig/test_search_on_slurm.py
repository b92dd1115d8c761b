"""The tiny GPT search on the real (local) Slurm, end to end: `search_config=gpt3/tiny` launches its 6 fastest
predicted layouts (TP 1/2, PP 1/2, micro-batch 1/2/4 on 2 processes) as one job array of 12-step runs, one at a
time; the analysis job waits for the whole array (afterany), reads each run's own files and writes final_result/.
The Spearman rank correlation between predicted and measured step time is printed (goal >= 0.8; measured 0.94 and
0.89 on the 2-core CI machine, docs/autoconfigurator.md); it is not asserted, as a loaded machine's timings move it."""

import csv
import re

from nemo_launcher.jobs.autoconfig.analysis import spearman

from .support import run_autoconfig

# Jobs share the fake nodes' CPUs: no exclusive nodes, one thread per process, 2 of the 8 fake GPUs per job.
SLURM_CPU = ["cluster.exclusive=False", "cluster.gpus_per_node=2", "+env_vars.OMP_NUM_THREADS=1"]


def _job_ids(out: str) -> list[str]:
    rows = [line.split() for line in out.splitlines() if line.startswith("training_search ")]
    return [row[2] for row in rows]


def test_tiny_search_on_slurm(slurm_cluster, tmp_path, capsys, tiny_search_data):
    results = tmp_path / "results"
    code, out, err = run_autoconfig(
        [
            "search_config=gpt3/tiny",
            "run_inference_hp_search=False",
            f"base_results_dir={results}",
            f"data_dir={tiny_search_data}",
            *SLURM_CPU,
        ],
        capsys,
        debug=False,
    )
    assert code == 0, err
    assert re.search(r"Candidates: 12 layouts in the grid, 9 allowed by the rules, 9 predicted to fit", out), out
    assert "3 dropped: TP x PP x CP does not divide the 2 GPUs" in out
    array, analysis = _job_ids(out)
    assert slurm_cluster.wait(analysis, timeout_s=600) == "COMPLETED"
    logs = results / "gpt3" / "tiny"
    with open(logs / "final_result" / "final_summary_1nodes.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    measured = [row for row in rows if row["status"] == "measured"]
    assert len(measured) == 6, [row["status"] for row in rows]
    times = [float(row["measured_step_time_s"]) for row in measured]
    assert times == sorted(times)
    rho = spearman([float(row["predicted_step_time_s"]) for row in measured], times)
    report = (logs / "final_result" / "top_3_configs_1nodes.log").read_text()
    assert f"Spearman rank correlation of predicted and measured step time: {rho:.3f} over 6 runs" in report
    print(f"\nSpearman rank correlation, predicted vs measured step time, tiny search on Slurm: {rho:.3f}")
    winner = measured[0]["name"]
    assert f"1. {winner}:" in report
    assert (logs / "final_result" / "optimal_config_0.00333b_1nodes.yaml").exists()
    # Each array task's log is its own: task i ran candidate i.
    for item in range(6):
        (task_log,) = (logs / "training_logs").glob(f"log-*_{array}_{item}_attempt0.out")
        assert f"candidate {item}: " in task_log.read_text()
