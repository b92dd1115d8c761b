"""Runs a job program on every rank, under Nsight Systems on the ranks asked for (model.nsys_profile).

    python3 -u -m nemo_launcher.jobs.common.nsys_profile --ranks 0,8 --trace nvtx,cuda --output <dir> \\
        -- nemo_launcher.jobs.gpt.train --config <resolved yaml>

The launcher renders this for every backend (srun, torchrun, bcprun); each rank reads its global rank from the
variables its launcher set (jobs/common/distributed.py) and replaces itself with `nsys profile ... python3 -u -m
<program> ...` when its rank is listed, or with the program alone otherwise. nsys records only between the
trainer's cudaProfilerStart/Stop (model.nsys_profile.start_step/end_step) and writes <output>/rank<R>.nsys-rep.
Standard library only: it must not pay for torch before the program it starts does.
"""

import argparse
import os
import shutil
import sys
from collections.abc import Sequence


def command_for(rank: int, ranks: Sequence[int], trace: str, output: str, program: list[str]) -> list[str]:
    """The argv this rank execs: the program, behind `nsys profile` when the rank is profiled."""
    from ...contract.schemas.gpu_training import nsys_argv

    python = [sys.executable, "-u", "-m", *program]
    return nsys_argv(trace, output, rank) + python if rank in ranks else python


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.common.nsys_profile")
    parser.add_argument("--ranks", required=True, help="comma-separated global ranks to profile")
    parser.add_argument("--trace", required=True, help="nsys profile -t value")
    parser.add_argument("--output", required=True, help="folder of the .nsys-rep files")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- module args...")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("name the program to run after --")
    from .distributed import placement_from_env

    rank = placement_from_env().rank
    ranks = [int(r) for r in args.ranks.split(",")]
    command = command_for(rank, ranks, args.trace, args.output, program)
    if rank in ranks:
        if shutil.which("nsys") is None:
            print(
                "Error: model.nsys_profile.enabled: true, but `nsys` (Nsight Systems) is not on PATH on "
                f"{os.uname().nodename}; use a container with Nsight Systems or set enabled: false",
                file=sys.stderr,
            )
            return 2
        os.makedirs(args.output, exist_ok=True)
    sys.stdout.flush()
    os.execvp(command[0], command)
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
