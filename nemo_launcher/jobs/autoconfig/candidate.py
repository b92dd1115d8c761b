"""Runs one candidate of an AutoConfigurator search: its family's training program on the config the launcher wrote.

    srun python3 -u -m nemo_launcher.jobs.autoconfig.candidate --manifest <logs>/training_logs/search_manifest.json
        (a Slurm array task: the candidate is SLURM_ARRAY_TASK_ID)
    python3 -m torch.distributed.run ... -m nemo_launcher.jobs.autoconfig.candidate --manifest ... --item 3 --keep-going
        (BCP and interactive run the candidates one after another in one job)

Every rank runs the training program in this process, with the candidate's own environment, and leaves what
happened in the candidate's own run directory (contract/autoconfig_search.py): rank 0 writes `started` before the
program starts and `finished` or `failed` after it; any rank whose program raised or exited non-zero writes its
reason (out of memory, or the error's first line). The analysis job reads those and the trainer's
measured_steps.json, so a crash of one candidate never shifts another's numbers. With --keep-going a failure
exits 0, so that the next candidate of a sequential job still runs.
"""

import argparse
import importlib
import os
import socket
import sys
import traceback
from datetime import UTC, datetime

from ...contract.autoconfig_search import FAILURE_PREFIX, read_manifest, write_status

OUT_OF_MEMORY_WORDS = ("out of memory", "outofmemoryerror", "cuda error: out of memory", "cannot allocate memory")


def rank_from_env() -> int:
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def failure_reason(error: BaseException) -> str:
    """`out of memory: <message>` for an allocation failure (CUDA or host), else `error: <type>: <message>`."""
    message = (str(error).strip().splitlines() or [""])[0][:300]
    text = f"{type(error).__name__} {error}".lower()
    if isinstance(error, MemoryError) or any(word in text for word in OUT_OF_MEMORY_WORDS):
        return f"out of memory: {message}"
    return f"error: {type(error).__name__}: {message}"


def item_of(arguments) -> int:
    if arguments.item is not None:
        return arguments.item
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
    if not task.isdigit():
        raise SystemExit("Error: --item or SLURM_ARRAY_TASK_ID must name the candidate to run")
    return int(task)


def run_candidate(manifest_path: str, item: int, keep_going: bool) -> int:
    manifest = read_manifest(manifest_path)
    runs = {run.item: run for run in manifest.runs}
    if item not in runs:
        print(f"Error: candidate {item} is not in {manifest_path} (items {sorted(runs)})", file=sys.stderr)
        return 2
    run, rank = runs[item], rank_from_env()
    if rank == 0:
        write_status(run.run_dir, {"state": "started", "host": socket.gethostname(), "started": utc_now()})
    os.environ.update(run.env)  # before the program imports torch: some of these are read once, at import
    print(f"candidate {item}: {run.name}", flush=True)
    reason = None
    try:
        code = importlib.import_module(run.program).main(["--config", run.config])
        if code:
            reason = f"error: the training program exited with status {code}"
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
        if code:
            reason = f"error: the training program exited with status {code}"
    except BaseException as error:  # noqa: BLE001  (recorded for the analysis, then raised again)
        code, reason = 1, failure_reason(error)
        traceback.print_exc()
        if not keep_going or isinstance(error, KeyboardInterrupt):
            write_status(
                run.run_dir, {"rank": rank, "reason": reason, "ended": utc_now()}, f"{FAILURE_PREFIX}{rank}.json"
            )
            raise
    if reason is not None:
        write_status(run.run_dir, {"rank": rank, "reason": reason, "ended": utc_now()}, f"{FAILURE_PREFIX}{rank}.json")
    if rank == 0:
        state = {"state": "failed" if reason else "finished", "exit_code": code, "ended": utc_now()}
        write_status(run.run_dir, {"host": socket.gethostname(), **state, "reason": reason})
    return 0 if keep_going else code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m nemo_launcher.jobs.autoconfig.candidate")
    parser.add_argument("--manifest", required=True, help="the search's search_manifest.json")
    parser.add_argument("--item", type=int, default=None, help="the candidate (default: SLURM_ARRAY_TASK_ID)")
    parser.add_argument("--keep-going", action="store_true", help="exit 0 after a failure (sequential jobs)")
    arguments = parser.parse_args(argv)
    return run_candidate(arguments.manifest, item_of(arguments), arguments.keep_going)


if __name__ == "__main__":
    sys.exit(main())
