"""A tiny job program for pipeline tests: records when it ran, then sleeps and exits as asked.

python3 -m tests.launch.slurm_probe --record FILE --name NAME [--sleep S] [--exit CODE] [--env NAME ...]

--env: variables whose values it records too (as NAME=value words after the times).
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--record", required=True)
parser.add_argument("--name", required=True)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--env", nargs="*", default=[])
args = parser.parse_args()
started = time.time()
time.sleep(args.sleep)
print(
    f"probe {args.name} attempt {os.environ.get('SLURM_RESTART_COUNT', '0')} job {os.environ.get('SLURM_JOB_ID')}",
    flush=True,
)
with open(args.record, "a") as record:
    values = "".join(f" {name}={os.environ.get(name, '')}" for name in args.env)
    record.write(f"{args.name} {started:.3f} {time.time():.3f}{values}\n")
sys.exit(args.exit)
