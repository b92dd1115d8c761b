"""Measures this machine's matrix-multiply rate for the performance model's CPU profile (gpu_type: cpu).

    python3 -m nemo_launcher.jobs.autoconfig.cpu_rate --size 64 --threads 1    # prints {"flops_per_s": 2.1e10}

The AutoConfigurator's launcher runs it once when a search on CPUs starts: the launch side never imports torch, and
a data sheet says nothing about a CPU shared with other work. It times fp32 multiplies of the shape a tiny model's
layers run (tokens x hidden by hidden x 4 hidden), in as many threads as each candidate process gets, and reports
the median of several repeats so that a moment of contention does not set the rate.
"""

import argparse
import json
import statistics
import sys
import time


def measure(size: int, tokens: int, threads: int, repeats: int = 7) -> float:
    import torch  # the job side: this program only runs where the candidates run

    torch.set_num_threads(threads)
    left, right = torch.randn(tokens, size), torch.randn(size, 4 * size)
    flops = 2 * tokens * size * 4 * size
    rates = []
    for _ in range(repeats):
        calls = 0
        start = time.perf_counter()
        while time.perf_counter() - start < 0.05:
            torch.matmul(left, right)
            calls += 1
        rates.append(calls * flops / (time.perf_counter() - start))
    return statistics.median(rates)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.autoconfig.cpu_rate")
    parser.add_argument("--size", type=int, default=64, help="the model's hidden size")
    parser.add_argument("--tokens", type=int, default=512, help="tokens in one multiply (micro-batch x sequence)")
    parser.add_argument("--threads", type=int, default=1, help="threads of one candidate process")
    arguments = parser.parse_args(argv)
    print(json.dumps({"flops_per_s": measure(arguments.size, arguments.tokens, arguments.threads)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
