"""Runs of the GPT training program for the trainer tests: configs, processes, and reading their results.

    config = write_config(tmp_path, data_dir, ["trainer.max_steps=8"])
    result = run_training(config, processes=2)          # torchrun when processes > 1
    losses(result.stdout) -> {1: 7.64, 2: 7.62, ...}
    weights(checkpoint_dir) -> {"decoder.layers.self_attention...": tensor, ...}

The model is the tiny GPT with shorter samples (32 tokens, micro-batch 2, global batch 4) on the tiny BPE's
2,048 tokens (pipeline_support.build_data), so its steps cost little next to the program's start.
"""

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import warm_python

REPO = Path(__file__).resolve().parents[2]
MODULE = "nemo_launcher.jobs.gpt.train"

FAST = [
    "model.encoder_seq_length=32",
    "model.micro_batch_size=2",
    "model.global_batch_size=4",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "model.optim.sched.warmup_steps=2",
]


def write_config(work: Path, data_dir: Path, overrides: Sequence[str] = (), name: str = "cfg.yaml") -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / name,
        "training",
        "gpt3/tiny",
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[*FAST, *overrides],
    )


def log_dir(work: Path) -> Path:
    return work / "results" / "gpt3_tiny" / "results"


def command(config: Path, processes: int = 1, program: Sequence[str] = (MODULE,), warm: bool = True) -> list[str]:
    """`program`: the module to run and any arguments before --config (the trainer core's test recipes). `warm`: in a
    fork of the warm interpreter (warm_python.py); False for a program that a test kills, whose rerun must find it
    gone at once."""
    python = warm_python.interpreter() if warm else sys.executable
    if processes > 1:
        return [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={processes}",
            "-m",
            *program,
            "--config",
            str(config),
        ]
    return [python, "-u", "-m", *program, "--config", str(config)]


def environment() -> dict[str, str]:
    return warm_python.environment(warm_python.job_environment(os.environ))


def run_training(
    config: Path, processes: int = 1, expect_rc: int = 0, timeout: int = 300, program: Sequence[str] = (MODULE,)
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        command(config, processes, program),
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != expect_rc:
        raise AssertionError(
            f"training exited {result.returncode}, expected {expect_rc}\n--- stdout\n"
            f"{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
        )
    return result


def start_training(config: Path, output: Path) -> subprocess.Popen:
    """The program in the background, its output in `output` (read it while it runs)."""
    handle = open(output, "w")
    return subprocess.Popen(
        command(config, warm=False), cwd=REPO, env=environment(), stdout=handle, stderr=subprocess.STDOUT, text=True
    )


_STEP_LINE = re.compile(r"^step=(\d+)/\d+ loss=([0-9.]+) .*global_batch_size=(\d+) microbatches=(\d+)", re.M)


def losses(stdout: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in _STEP_LINE.finditer(stdout)}


def step_losses(stdout: str) -> dict[int, dict[str, float]]:
    """step -> every `<name>loss=<value>` field of its progress line (loss, and a recipe's other losses)."""
    found = {}
    for line in stdout.splitlines():
        match = re.match(r"^step=(\d+)/\d+ ", line)
        if match:
            found[int(match.group(1))] = {
                name: float(value) for name, value in re.findall(r" (\w*loss)=([0-9.]+)", line)
            }
    return found


def batch_sizes(stdout: str) -> dict[int, tuple]:
    """step -> (global batch size, microbatches) from the progress lines."""
    return {int(m.group(1)): (int(m.group(3)), int(m.group(4))) for m in _STEP_LINE.finditer(stdout)}


def weights(checkpoint: Path, scratch: Path) -> dict[str, "object"]:
    """Every model tensor of a dist checkpoint, whole, read with torch's own converter (not our loader)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = scratch / f"{checkpoint.parent.parent.parent.name}-{checkpoint.name}.pt"
    dcp_to_torch_save(str(checkpoint), str(target))
    state = torch.load(target, weights_only=False)
    return {
        k: v
        for k, v in state.items()
        if isinstance(v, torch.Tensor) and not k.startswith("optimizer.") and "_extra_state" not in k
    }
