"""Tokens/s of our GPT trainer (Lightning loop) against a plain megatron-core loop, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/trainer_overhead.py [--steps 40] [--rounds 2]

Both sides train the tiny GPT (conf/training/gpt3/tiny.yaml) on the same data for the same steps, from
the same parts (nemo_launcher.jobs.core.parts with the GPT recipe: model chunks, megatron DDP, megatron
optimizer, dataset, sampler), each in a fresh process. The plain side is the loop Megatron-LM's pretrain_gpt runs: fetch a
step's batch, zero the grad buffers, get_forward_backward_func(), set the learning rate, optimizer.step().
Ours is `python3 -m nemo_launcher.jobs.gpt.train` itself, read from its progress lines, with checkpoints,
validation and the test pass turned off so that only the loop differs.

Throughput counts the steps after the first logging window (start-up and first-step costs excluded) on
both sides. The machine is shared, so the sides alternate for --rounds rounds and each keeps its best
round. The last line is `ratio=<ours / plain>`; the goal is >= 0.95.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _overrides(steps: int, window: int):
    return [
        f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={window}",
        f"trainer.val_check_interval={steps}",
        "trainer.limit_val_batches=0",
        "trainer.limit_test_batches=0",
        "trainer.max_time=null",
        "exp_manager.create_checkpoint_callback=false",
        "exp_manager.create_tensorboard_logger=false",
        "exp_manager.resume_if_exists=false",
    ]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")


def ours(config: Path, window: int) -> float:
    """Tokens/s of the trainer over all logging windows but the first."""
    result = subprocess.run([sys.executable, "-u", "-m", "nemo_launcher.jobs.gpt.train", "--config", str(config)],
                            cwd=REPO, env=_env(), capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"trainer failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    lines = re.findall(r"^step=(\d+)/\d+ .*tokens_per_sec=(\d+) step_time=([0-9.]+)s", result.stdout, re.M)
    later = [(int(step), float(tps), float(seconds)) for step, tps, seconds in lines if int(step) > window]
    tokens = sum(tps * seconds * window for _, tps, seconds in later)
    seconds = sum(seconds * window for _, _, seconds in later)
    return tokens / seconds


def plain(config: Path, window: int) -> float:
    result = subprocess.run([sys.executable, "-u", __file__, "--plain-loop", str(config), "--window", str(window)],
                            cwd=REPO, env=_env(), capture_output=True, text=True)
    match = re.search(r"^plain_tokens_per_sec=([0-9.]+)$", result.stdout, re.M)
    if result.returncode or not match:
        raise SystemExit(f"plain loop failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return float(match.group(1))


def plain_loop(config: Path, window: int) -> None:
    """Runs in its own process: the same parts as the trainer, driven by a bare loop."""
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.jobs.core.optim import set_hyperparameters
    from nemo_launcher.jobs.core.parts import build_parts, init_processes, shutdown
    from nemo_launcher.jobs.core.recipe import split_along_batch
    from nemo_launcher.jobs.core.samplers import StepBatchSampler, make_loader
    from nemo_launcher.jobs.core.steps import run_microbatches
    from nemo_launcher.jobs.gpt.recipe import GPT, gpt_forward_step

    cfg = TrainingConfig.from_dict(load_resolved_config(config))
    placement = placement_from_env()
    parts = build_parts(GPT, cfg, placement, init_processes(GPT, cfg, placement))
    m = parts.cfg.model
    sampler = StepBatchSampler(len(parts.train_dataset), parts.batches, cfg.trainer.max_steps, lambda: 0, parts.dp_rank)
    loader = make_loader(parts.train_dataset, sampler, m.data.num_workers, parts.on_gpu, m.seed)
    for chunk in parts.ddp_chunks:
        chunk.train()
    tokens, started = 0, None
    consumed = 0
    for step, batch in enumerate(loader):
        batch_size = parts.batches.batch_size(consumed)
        for chunk in parts.ddp_chunks:
            chunk.zero_grad_buffer()
        parts.optimizer.zero_grad()
        losses = run_microbatches(parts.ddp_chunks, split_along_batch(batch, m.micro_batch_size), gpt_forward_step,
                                  parts.sequences, m.micro_batch_size, forward_only=False)
        set_hyperparameters(parts.optimizer, parts.lr_schedule(step), m.optim.weight_decay)
        parts.optimizer.step()
        consumed += batch_size
        if (step + 1) % window == 0:
            losses["lm loss"].item()  # the trainer reads the loss at each log point too
        if step + 1 == window:
            started = time.perf_counter()
        elif step + 1 > window:
            tokens += batch_size * m.encoder_seq_length
    seconds = time.perf_counter() - started
    shutdown()
    print(f"plain_tokens_per_sec={tokens / seconds:.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--window", type=int, default=10, help="steps per logging window; the first is not timed")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plain-loop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        plain_loop(args.plain_loop, args.window)
        return 0
    if args.steps % args.window or args.steps <= args.window:
        parser.error("--steps must be a multiple of --window and larger than it")

    from nemo_launcher.jobs.common.sample_data import build_sample_data
    from nemo_launcher.launch.stage_config import write_stage_config

    with tempfile.TemporaryDirectory(prefix="trainer_overhead_") as scratch:
        work = Path(scratch)
        build_sample_data(work / "data")
        config = write_stage_config(work / "gpt3_tiny_hydra.yaml", "training", "gpt3/tiny", data_dir=work / "data",
                                    base_results_dir=work / "results", overrides=_overrides(args.steps, args.window))
        best_ours, best_plain = 0.0, 0.0
        for round_ in range(1, args.rounds + 1):
            measured_plain = plain(config, args.window)
            measured_ours = ours(config, args.window)
            print(f"round {round_}: plain {measured_plain:,.0f} tokens/s, ours {measured_ours:,.0f} tokens/s", flush=True)
            best_plain, best_ours = max(best_plain, measured_plain), max(best_ours, measured_ours)
    print(f"plain megatron-core loop: {best_plain:,.0f} tokens/s (best of {args.rounds})")
    print(f"our trainer (Lightning):  {best_ours:,.0f} tokens/s (best of {args.rounds})")
    print(f"ratio={best_ours / best_plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
