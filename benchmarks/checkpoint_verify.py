"""What recording and checking each checkpoint file's size and CRC-32 costs, against the save itself, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/checkpoint_verify.py [--megabytes 300] [--rounds 5]

Two checkpoints, each saved with torch.distributed.checkpoint's FileSystemWriter as megatron-core's torch_dist
backend uses it (two writer threads, so two `__<rank>_<n>.distcp` shards, `.metadata`, each file fsynced) into a
temporary folder:
- tiny_gpt: the tiny GPT's own checkpoint (conf/training/gpt3/tiny.yaml, weights and Adam's moments), written
  first by a 2-step run of `python3 -m nemo_launcher.jobs.gpt.train` on the sample corpus, then read back whole;
- large: --megabytes of random fp32 tensors (16 MiB each), as a model with its optimizer state would write.
Per round and checkpoint: the save alone (baseline), then what a save now adds after it
(jobs/core/checkpoint_manifest.record over the folder the save just wrote, still in the page cache, as in a real
save), then what a resume adds before it loads (checkpoint_manifest.check of every file against the record). The
best round of each is compared; per checkpoint one line `<name> bytes=.. save=..s record=..s verify=..s
ratio=<(save + record) / save>`. A resume's check reads what the load reads next, so on a cold cache it moves the
disk reads earlier rather than doubling them.

Then the save path as it runs: the tiny GPT's training program with a position table of --positions rows (~300 MB
of checkpoint with Adam's moments), saving every step. Its own lines time each save, record included; the record
of each folder is timed again here. The last line: `trainer bytes=.. save=..s record=..s ratio=<save / (save -
record)>`, what the checksums add to a real save; the goal is ratio <= 1.10.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TENSOR_MIB = 16
WRITER_THREADS = 2  # megatron-core's torch_dist save strategy writes with 2 threads, 2 files per rank


def tiny_gpt_state(work: Path) -> dict:
    """The tiny GPT's checkpoint after 2 steps, as written by the training program, loaded back as tensors."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from tests.jobs import warm_python
    from tests.jobs.gpt_train_support import write_config
    from tests.jobs.pipeline_support import build_data

    build_data(work / "data")
    steps = ["trainer.max_steps=2", "model.optim.sched.warmup_steps=1", "trainer.limit_val_batches=0"]
    config = write_config(work, work / "data", [*steps, "exp_manager.checkpoint_callback_params.every_n_train_steps=2"])
    env = warm_python.job_environment(os.environ)
    subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.gpt.train", "--config", str(config)],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    (step,) = (work / "results").glob("**/checkpoints/step-2")
    dcp_to_torch_save(str(step), str(work / "tiny.pt"))
    state = torch.load(work / "tiny.pt", weights_only=False)
    return {key: value for key, value in _flat(state) if isinstance(value, torch.Tensor)}


def _flat(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def large_state(megabytes: int) -> dict:
    import torch

    generator = torch.Generator().manual_seed(0)
    count = max(1, megabytes // TENSOR_MIB)
    numel = TENSOR_MIB * 2**20 // 4
    return {f"layer{i}.weight": torch.rand(numel, generator=generator) for i in range(count)}


def measure(state: dict, folder: Path) -> tuple[float, float, float, int]:
    """(save s, record s, verify s, bytes) of one round in a fresh folder."""
    import torch.distributed.checkpoint as dcp

    from nemo_launcher.jobs.core import checkpoint_manifest

    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    writer = dcp.FileSystemWriter(str(folder), sync_files=True, thread_count=WRITER_THREADS)
    dcp.save(state, storage_writer=writer, no_dist=True)
    saved = time.perf_counter()
    files = checkpoint_manifest.record(folder)
    recorded = time.perf_counter()
    problems = checkpoint_manifest.check(folder, files)
    verified = time.perf_counter()
    assert not problems, problems
    size = sum(entry["bytes"] for entry in files.values())
    return saved - started, recorded - saved, verified - recorded, size


def trainer_saves(work: Path, positions: int, steps: int = 4) -> tuple[float, float, int]:
    """The training program itself, saving every step: (mean save s as its `checkpoint step=N saved ... in X.Xs`
    lines say, record included; mean record s of those folders, measured again here; bytes of one checkpoint). A
    learned position table of `positions` rows (only 32 are looked up) sizes the checkpoint without slowing the steps
    much, as tests/jobs/common/test_job_faults.py does."""
    import re

    from nemo_launcher.jobs.core import checkpoint_manifest
    from tests.jobs import warm_python
    from tests.jobs.gpt_train_support import log_dir, write_config

    overrides = [
        f"trainer.max_steps={steps}",
        "model.optim.sched.warmup_steps=1",
        "trainer.limit_val_batches=0",
        "exp_manager.checkpoint_callback_params.every_n_train_steps=1",
        "exp_manager.checkpoint_callback_params.save_top_k=-1",
        f"model.max_position_embeddings={positions}",
    ]
    run = work / "trainer"  # a run of its own: the tiny run's checkpoints hold a smaller table
    run.mkdir()
    config = write_config(run, work / "data", overrides)
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.gpt.train", "--config", str(config)],
        cwd=REPO,
        env=warm_python.job_environment(os.environ),
        check=True,
        capture_output=True,
        text=True,
    )
    saves = [float(s) for s in re.findall(r"^checkpoint step=\d+ saved to \S+ in ([\d.]+)s$", result.stdout, re.M)]
    folders = sorted((log_dir(run) / "checkpoints").glob("step-*"))
    records = []
    for folder in folders:
        started = time.perf_counter()
        checkpoint_manifest.record(folder)
        records.append(time.perf_counter() - started)
    size = sum(entry.stat().st_size for entry in folders[-1].iterdir())
    return sum(saves) / len(saves), sum(records) / len(records), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=300, help="size of the large checkpoint")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--positions", type=int, default=400_000, help="rows of the trainer run's position table: 400,000 give ~300 MB"
    )
    args = parser.parse_args()
    import warnings

    warnings.filterwarnings("ignore")  # torch's notes on saving without a process group say nothing about the cost
    with tempfile.TemporaryDirectory(prefix="checkpoint_verify_") as scratch:
        work = Path(scratch)
        states = {"tiny_gpt": tiny_gpt_state(work), "large": large_state(args.megabytes)}
        for name, state in states.items():
            rounds = [measure(state, work / name) for _ in range(args.rounds)]
            save, record, verify = (min(r[i] for r in rounds) for i in range(3))
            print(
                f"{name} bytes={rounds[0][3]} save={save:.4f}s record={record:.4f}s verify={verify:.4f}s "
                f"ratio={(save + record) / save:.3f}",
                flush=True,
            )
        save, record, size = trainer_saves(work, args.positions)
        print(
            f"trainer bytes={size} save={save:.4f}s (record included) record={record:.4f}s "
            f"ratio={save / (save - record):.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
