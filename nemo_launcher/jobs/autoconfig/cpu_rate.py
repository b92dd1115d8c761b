"""Measures this machine for the performance model's CPU profile (gpu_type: cpu): a matrix-multiply rate, the fixed
cost of one framework operation and the latency of one collective between two processes.

    python3 -m nemo_launcher.jobs.autoconfig.cpu_rate --size 64 --threads 1
    # {"flops_per_s": 2.1e10, "op_overhead_s": 2.4e-05, "collective_latency_s": 0.00031}

The AutoConfigurator's launcher runs it once when a search on CPUs starts: the launch side never imports torch, and
a data sheet says nothing about a CPU shared with other work. Each figure is the median of several repeats so that a
moment of contention does not set it:
- the rate: fp32 multiplies of the shape a tiny model's layers run (tokens x hidden by hidden x 4 hidden), in as many
  threads as each candidate process gets;
- an operation's overhead: a chain of small element-wise operations with autograd, forward and backward, per
  operation (what a tiny model's step mostly is);
- a collective's latency: an all-reduce of a few values between two processes over Gloo, as tensor-parallel ranks on
  one CPU node do it.
"""

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time

CHAIN = 50  # operations in one timed chain
ROUNDS = 30  # all-reduces per timed round


def _median_rate(work, repeats: int = 7, window_s: float = 0.05) -> float:
    """Median over `repeats` windows of how many calls of `work` run per second."""
    rates = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < window_s:
            work()
            calls += 1
        rates.append(calls / (time.perf_counter() - start))
    return statistics.median(rates)


def matmul_flops_per_s(size: int, tokens: int) -> float:
    import torch  # the job side: this program only runs where the candidates run

    left, right = torch.randn(tokens, size), torch.randn(size, 4 * size)
    return 2 * tokens * size * 4 * size * _median_rate(lambda: torch.matmul(left, right))


def op_overhead_s() -> float:
    """Seconds per operation of a chain of small autograd operations, forward and backward (the backward's two
    operations per forward one counted, as the step-time model counts them)."""
    import torch

    start = torch.ones(16, requires_grad=True)

    def chain():
        value = start
        for _ in range(CHAIN):
            value = value * 1.0001
        value.sum().backward()

    return 1.0 / (_median_rate(chain) * 3 * CHAIN)


def _all_reduce_rounds(rank: int, port: int, results) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tensor = torch.ones(8)
    for _ in range(5):  # warm the connection
        dist.all_reduce(tensor)
    timings = []
    for _ in range(7):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(ROUNDS):
            dist.all_reduce(tensor)
        timings.append((time.perf_counter() - start) / ROUNDS)
    if rank == 0:
        results.put(statistics.median(timings))
    dist.destroy_process_group()


def collective_latency_s() -> float:
    with socket.socket() as probe:  # a free port for the two processes' rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = multiprocessing.get_context("fork")  # forked: the children need not import torch again
    results = context.Queue()
    workers = [context.Process(target=_all_reduce_rounds, args=(rank, port, results)) for rank in (0, 1)]
    for worker in workers:
        worker.start()
    latency = results.get(timeout=120)
    for worker in workers:
        worker.join(timeout=60)
    return latency


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.autoconfig.cpu_rate")
    parser.add_argument("--size", type=int, default=64, help="the model's hidden size")
    parser.add_argument("--tokens", type=int, default=512, help="tokens in one multiply (micro-batch x sequence)")
    parser.add_argument("--threads", type=int, default=1, help="threads of one candidate process")
    arguments = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(arguments.threads))
    import torch

    torch.set_num_threads(arguments.threads)
    figures = {
        "flops_per_s": matmul_flops_per_s(arguments.size, arguments.tokens),
        "op_overhead_s": op_overhead_s(),
        "collective_latency_s": collective_latency_s(),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
