"""Tokens/s of our DiT trainer (Lightning loop) against a plain megatron-core loop of the same DiT, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/dit_overhead.py [--steps 100] [--window 10] [--rounds 5]

benchmarks/trainer_overhead.py's `dit` family: both sides train the tiny DiT (conf/training/dit/tiny.yaml) on seed
002's mock latents (the same samples, so no data preparation runs) from the same parts
(nemo_launcher.jobs.dit.recipe's build_dit_parts: the DiT on megatron-core layers, megatron DDP and optimizer, the
core's step sampler), each in a fresh process. The plain side is the loop a megatron-core training script runs;
ours is `python3 -m nemo_launcher.jobs.dit.train` itself, read from its progress lines, with checkpoints and
TensorBoard off. Tokens are latent tokens (patches), as the trainer counts them. Rounds run both sides back to
back, alternating which goes first. The last line is `dit ratio=<best ours / best plain> cpu_ratio=<the same by CPU
time> median_ratio=<median of the rounds' ratios> median_cpu_ratio=<the same by CPU time>`; the goal is >= 0.95.
A DiT step is short (~50 ms here), so it runs 100 steps by default, not the other families' 40: over 30 timed steps
the rounds scattered by +-4% (best-of ratio 0.944, median 0.955 on a quiet machine); over 90, 0.972 and 0.980.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trainer_overhead  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["--families", "dit", "--steps", "100"]  # a later --steps of the caller's wins
    sys.exit(trainer_overhead.main())
