"""CPU time a job process spends importing PyTorch Lightning, with the job package's torchmetrics hook and without.

    OMP_NUM_THREADS=1 python3 benchmarks/lightning_import_cost.py [--runs 5]

Each run is a fresh `python3 -c "import nemo_launcher.jobs; import pytorch_lightning"` timed by its own CPU clock
(time.process_time around the Lightning import, torch included). The baseline process removes the torchmetrics
entries from the import hooks first (nemo_launcher/jobs/common/import_hooks.py, item 3), so torchmetrics imports
SciPy's signal package, transformers and matplotlib as it does by itself; the other hooks stay in both. Runs
alternate, so background load hits both alike. Last line: ratio=<baseline / ours> (above 1: ours is cheaper).
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMED = """
import sys, time
import nemo_launcher.jobs.common.import_hooks as hooks
if {baseline}:
    for name in (hooks.METRICS_PACKAGE, hooks.METRICS_FLAGS_MODULE):
        del hooks._Finder._WRAPPERS[name]
import nemo_launcher.jobs
started = time.process_time()
import pytorch_lightning
print(
    time.process_time() - started,
    *(name for name in ("scipy.signal", "transformers", "matplotlib") if name in sys.modules),
)
"""


def cpu_seconds(baseline: bool) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", TIMED.format(baseline=baseline)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, *imported = result.stdout.split()
    expected = ["scipy.signal", "transformers", "matplotlib"] if baseline else []
    if imported != expected:
        raise SystemExit(f"{'baseline' if baseline else 'ours'} imported {imported}, expected {expected}")
    return float(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cpu_seconds(False), cpu_seconds(True)  # warm the file cache and bytecode for both
    ours, baseline = [], []
    for _ in range(args.runs):
        ours.append(cpu_seconds(False))
        baseline.append(cpu_seconds(True))
    print(
        f"import pytorch_lightning, torchmetrics hook on:  min {min(ours):.2f} s CPU, "
        f"median {statistics.median(ours):.2f}"
    )
    print(
        f"import pytorch_lightning, torchmetrics as it is: min {min(baseline):.2f} s CPU, "
        f"median {statistics.median(baseline):.2f}"
    )
    print(f"saved per process: {statistics.median(baseline) - statistics.median(ours):.2f} s CPU (medians)")
    print(
        f"ratio={min(baseline) / min(ours):.2f} "
        f"median_ratio={statistics.median(baseline) / statistics.median(ours):.2f}"
    )


if __name__ == "__main__":
    main()
