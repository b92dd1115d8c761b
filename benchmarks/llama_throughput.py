"""Tokens/s of our trainer on the tiny Llama against a plain megatron-core loop of the same model, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/llama_throughput.py [--steps 40] [--window 10] [--rounds 5]
    OMP_NUM_THREADS=1 python3 benchmarks/llama_throughput.py --families mixtral     (the tiny Mixtral instead)

benchmarks/trainer_overhead.py's `llama` family: both sides train conf/training/llama/tiny.yaml (RMSNorm, SwiGLU,
rotary positions, grouped-query attention) on what data_preparation=llama/tiny_pile writes (run first, here: the
tiny Pile tokenized by the byte-level BPE tokenizer.json it learns), from the same parts (the core's build_parts
with GPT's recipe), each in a fresh process. The plain side is the loop a megatron-core training script runs; ours
is `python3 -m nemo_launcher.jobs.gpt.train` itself, read from its progress lines, with checkpoints, validation and
TensorBoard off. Rounds run both sides back to back, alternating which goes first. The last line is `llama
ratio=<best ours / best plain> cpu_ratio=<the same by CPU time> median_ratio=<median of the rounds' ratios>
median_cpu_ratio=<the same by CPU time>`; the goal is >= 0.95.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trainer_overhead  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["--families", "llama"]  # a later --families of the caller's wins
    sys.exit(trainer_overhead.main())
