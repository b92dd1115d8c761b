"""CPU time of a job program that a job test starts, in a fresh interpreter and in a fork of the warm interpreter.

    OMP_NUM_THREADS=1 python3 benchmarks/warm_test_jobs.py [--runs 5]

The program is the tiny GPT training of the trainer tests (tests/jobs/gpt_train_support.py: 4 steps on the tiny BPE's
data), started as the tests start it: `<python> -u -c <runner>`, where the runner runs the training module as
`python -m` would and, at exit, prints the CPU time its process used (user + system, its children excluded): for a
fresh interpreter everything from its start, for a fork of the warm interpreter (tests/jobs/warm_python.py)
everything from the fork. Runs alternate, so background load hits both alike. The warm interpreter's own start, paid
once per pytest worker, is printed apart. Last line: ratio=<fresh / warm> of the medians (above 1: warm is cheaper).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.jobs import warm_python  # noqa: E402
from tests.jobs.gpt_train_support import MODULE, environment, write_config  # noqa: E402
from tests.jobs.pipeline_support import build_data  # noqa: E402

RUNNER = """
import atexit, resource, runpy, sys
def report():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"JOB_CPU {usage.ru_utime + usage.ru_stime:.3f}", file=sys.stderr)
atexit.register(report)
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def job_cpu(python: str, config: Path) -> float:
    done = subprocess.run(
        [python, "-u", "-c", RUNNER, MODULE, "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the training failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return float(done.stderr.rsplit("JOB_CPU ", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        # megatron-core says at import that Transformer Engine and Apex are missing (they are GPU extras).
        warnings.filterwarnings("ignore", category=UserWarning, module="megatron")
        build_data(work / "data")
        started = time.perf_counter()
        warm = warm_python.interpreter()
        print(f"warm interpreter start: {time.perf_counter() - started:.2f} s wall (once per pytest worker)")
        timings = {"fresh": [], "warm": []}
        for run in range(runs):
            for name, python in (("fresh", sys.executable), ("warm", warm)):
                config = write_config(work / f"{name}{run}", work / "data", ["trainer.max_steps=4"])
                timings[name].append(job_cpu(python, config))
                print(f"run {run + 1}/{runs} {name:5s} {timings[name][-1]:.2f} CPU-s", flush=True)
    fresh, ours = statistics.median(timings["fresh"]), statistics.median(timings["warm"])
    print(f"tiny GPT training (4 steps), median CPU-s: fresh {fresh:.2f}, warm {ours:.2f}")
    print(f"ratio={fresh / ours:.2f}")


if __name__ == "__main__":
    main()
