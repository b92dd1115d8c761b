"""Stand-ins for a family's training program's `main(argv)`, for the candidate program's tests: each ends one way."""

import json
import sys
from pathlib import Path


def out_of_memory(argv):
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")


def exits_three(argv):
    return 3


def measures(argv):
    config = Path(argv[argv.index("--config") + 1])
    print(f"trained {json.loads(config.read_text())['name']}", file=sys.stdout)
    return 0
