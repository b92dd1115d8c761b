"""Tokens/s of our DiT trainer (Lightning loop) against a plain megatron-core loop of the same DiT, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/dit_overhead.py [--steps 40] [--window 10] [--rounds 2]

Both sides train the tiny DiT (conf/training/dit/tiny.yaml) on seed 002's mock latents (the same samples, so no
data preparation is needed) for the same steps, from the same parts (nemo_launcher.jobs.dit.recipe's
build_dit_parts: the DiT on megatron-core layers, megatron DDP and optimizer, the core's step sampler), each in a
fresh process. The plain side is the loop a megatron-core training script runs: fetch a step's batch, zero the grad
buffers, get_forward_backward_func() with the DiT forward step, set the learning rate, optimizer.step(). Ours is
`python3 -m nemo_launcher.jobs.dit.train` itself, read from its progress lines, with checkpoints and TensorBoard
off. Tokens are latent tokens (patches), as the trainer counts them. The measuring, alternating and best-of-rounds
are benchmarks/trainer_overhead.py's. The last line is `dit ratio=<ours / plain>`; the goal is >= 0.95.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import trainer_overhead  # noqa: E402  (its measuring helpers: ours(), _overrides(), _env())

DIT = trainer_overhead.Family("nemo_launcher.jobs.dit.train", "dit/tiny", "")
# Mock latents of the tiny model's shape: 64 tokens a sample, 32 samples a step in 2 microbatches.
MOCK = ["model.data.data_type=mock", "model.data.num_workers=0"]


def plain(config: Path, window: int) -> float:
    result = subprocess.run([sys.executable, "-u", __file__, "--plain-loop", str(config), "--window", str(window)],
                            cwd=REPO, env=trainer_overhead._env(), capture_output=True, text=True)
    for line in result.stdout.splitlines():
        if line.startswith("plain_tokens_per_sec=") and not result.returncode:
            return float(line.split("=", 1)[1])
    raise SystemExit(f"plain loop failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def plain_loop(config: Path, window: int) -> None:
    """Runs in its own process: the trainer's parts, driven by a bare loop."""
    from nemo_launcher.contract.schemas.dit_training import DitTrainingConfig
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.parts import init_processes, shutdown
    from nemo_launcher.jobs.dit.recipe import build_dit_parts, dit_recipe

    cfg = DitTrainingConfig.from_dict(load_resolved_config(config))
    recipe = dit_recipe(cfg)
    placement = placement_from_env()
    parts = build_dit_parts(recipe, cfg, placement, init_processes(recipe, cfg, placement))
    tokens, seconds, _ = trainer_overhead.drive_parts(recipe, cfg, parts, window)
    shutdown()
    print(f"plain_tokens_per_sec={tokens / seconds:.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--window", type=int, default=10, help="steps per logging window; the first is not timed")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plain-loop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from nemo_launcher.jobs.common.quiet import install_warning_filters

    install_warning_filters()
    if args.plain_loop:
        plain_loop(args.plain_loop, args.window)
        return 0
    if args.steps % args.window or args.steps <= args.window:
        parser.error("--steps must be a multiple of --window and larger than it")
    from nemo_launcher.launch.stage_config import write_stage_config

    with tempfile.TemporaryDirectory(prefix="dit_overhead_") as scratch:
        work = Path(scratch)
        config = write_stage_config(work / "dit_tiny_hydra.yaml", "training", DIT.config, data_dir=work / "data",
                                    base_results_dir=work / "results",
                                    overrides=[*trainer_overhead._overrides(args.steps, args.window), *MOCK])
        best_ours, best_plain = 0.0, 0.0
        for round_ in range(1, args.rounds + 1):
            measured_plain = plain(config, args.window)
            measured_ours = trainer_overhead.ours(DIT, config, args.window).wall
            print(f"dit round {round_}: plain {measured_plain:,.0f} tokens/s, ours {measured_ours:,.0f} tokens/s", flush=True)
            best_plain, best_ours = max(best_plain, measured_plain), max(best_ours, measured_ours)
    print(f"dit plain megatron-core loop: {best_plain:,.0f} tokens/s (best of {args.rounds})")
    print(f"dit our trainer (Lightning):  {best_ours:,.0f} tokens/s (best of {args.rounds})")
    print(f"dit ratio={best_ours / best_plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
