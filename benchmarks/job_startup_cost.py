"""CPU time a job process spends importing what it needs, with the job package's import hooks and without.

    OMP_NUM_THREADS=1 python3 benchmarks/job_startup_cost.py [--runs 5]

For each program below, a fresh `python3 -c` imports the job package and then the modules that program imports
before its first step (its own modules, megatron-core, Lightning, ...), timed by its own CPU clock
(time.process_time, torch included), and a training process then checks a folder as Lightning does before its first
checkpoint (cloud_io._is_dir, which asks whether the folder is object storage). The plain process takes the hooks'
finder out of sys.meta_path right after importing the job package (nemo_launcher/jobs/common/import_hooks.py), so
every third-party package imports as it does by itself. Runs alternate, so background load hits both alike. Per
program: medians and their ratio; last line: ratio=<plain / ours> for GPT training (above 1: ours is cheaper).
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What each program imports before its first step (read off `python3 -X importtime` of a tiny run).
PROGRAMS = {
    "gpt training": [
        "nemo_launcher.jobs.core.program",
        "nemo_launcher.jobs.gpt.recipe",
        "nemo_launcher.jobs.core.callbacks",
        "nemo_launcher.jobs.core.module",
        "nemo_launcher.jobs.core.strategy",
        "megatron.core.models.gpt.gpt_layer_specs",
        "megatron.core.datasets.blended_megatron_dataset_builder",
        "torch.utils.tensorboard",
    ],  # exp_manager.create_tensorboard_logger: true, the default
    "gpt conversion": [
        "nemo_launcher.jobs.core.conversion",
        "nemo_launcher.jobs.gpt.converter",
        "nemo_launcher.jobs.gpt.recipe",
        "megatron.core.dist_checkpointing",
        "megatron.core.models.gpt.gpt_layer_specs",
    ],
}

# What a program calls before its first step that imports more (Lightning's checkpoint-folder check).
FIRST_CALLS = {
    "gpt training": (
        "import tempfile\n"
        "from lightning_fabric.utilities.cloud_io import _is_dir, get_filesystem\n"
        "folder = tempfile.mkdtemp()\n"
        "_is_dir(get_filesystem(folder), folder)\n"
    ),
}

TIMED = """
import importlib, sys, time
import nemo_launcher.jobs
from nemo_launcher.jobs.common import import_hooks
if {plain}:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, import_hooks._Finder)]
started = time.process_time()
for name in {modules!r}:
    importlib.import_module(name)
{first_calls}
print(time.process_time() - started)
"""


def cpu_seconds(modules, plain: bool, first_calls: str = "") -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    code = TIMED.format(plain=plain, modules=modules, first_calls=first_calls)
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"{'plain' if plain else 'ours'} {modules} failed:\n{result.stderr[-2000:]}")
    return float(result.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ratios = {}
    for program, modules in PROGRAMS.items():
        calls = FIRST_CALLS.get(program, "")
        cpu_seconds(modules, False, calls), cpu_seconds(modules, True, calls)  # warm the file cache and bytecode
        ours, plain = [], []
        for _ in range(args.runs):
            ours.append(cpu_seconds(modules, False, calls))
            plain.append(cpu_seconds(modules, True, calls))
        ours_median, plain_median = statistics.median(ours), statistics.median(plain)
        ratios[program] = plain_median / ours_median
        print(
            f"{program}: hooks {ours_median:.2f} s CPU, plain {plain_median:.2f} s CPU (medians of {args.runs}), "
            f"saved {plain_median - ours_median:.2f} s per process, ratio {ratios[program]:.2f}"
        )
    print(f"ratio={ratios['gpt training']:.2f}")


if __name__ == "__main__":
    main()
