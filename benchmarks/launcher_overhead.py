"""Launcher start-up cost against a bare Hydra app, measured in one run.

    python3 benchmarks/launcher_overhead.py [--runs 7]

Times `NEMO_LAUNCHER_DEBUG=1 python3 main.py stages=[training] training=gpt3/5b` (compose, validate, render,
write) against a minimal @hydra.main app with a one-key config, each as a fresh process, and prints the minimum
of several runs of each. Last line: ratio=<ours / bare Hydra>.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BARE_APP = """
import hydra

@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    print(cfg.message)

if __name__ == "__main__":
    main()
"""


def best_time(argv, cwd, env, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare"
        (bare / "conf").mkdir(parents=True)
        (bare / "conf" / "config.yaml").write_text("message: hello\n")
        (bare / "app.py").write_text(BARE_APP)
        env = dict(os.environ, NEMO_LAUNCHER_DEBUG="1")
        # Installed code runs from its bytecode cache (site-packages has one for Hydra): let the warm-up run write
        # ours too, or every timed run would pay for compiling the launcher's modules and the bare app would not.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        ours_argv = [
            sys.executable,
            "main.py",
            "stages=[training]",
            "training=gpt3/5b",
            f"base_results_dir={tmp}/results",
        ]
        # Warm the file cache for both before timing.
        best_time(ours_argv, REPO, env, 1)
        best_time([sys.executable, "app.py"], bare, env, 1)
        ours, baseline = [], []
        for _ in range(args.runs):  # interleaved, so background load hits both alike
            ours.append(best_time(ours_argv, REPO, env, 1))
            baseline.append(best_time([sys.executable, "app.py"], bare, env, 1))
    print(f"launcher dry run (gpt3/5b training): {min(ours):.3f} s (min of {args.runs})")
    print(f"bare Hydra app:                      {min(baseline):.3f} s (min of {args.runs})")
    print(f"ratio={min(ours) / min(baseline):.2f}")


if __name__ == "__main__":
    main()
