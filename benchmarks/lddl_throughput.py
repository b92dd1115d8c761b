"""Real tokens/s (padding excluded) of the tiny BERT on LDDL's length bins against the same model on the padded
indexed data set, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/lddl_throughput.py [--steps 40] [--rounds 3] [--window 5]

Data: `data_preparation=bert/tiny_pile_lddl` with preprocess_data=True, run here first, writes both from the same
three tiny Pile shards and the same trained lower-case WordPiece vocabulary: the indexed sentences megatron-core's
BERT dataset samples from (every sample padded to encoder_seq_length, 128) and LDDL's bins of 32 tokens (every
micro-batch padded to its bin's edge). Model: conf/training/bert/tiny.yaml, the same weights, batches and steps on
both sides, built by the trainer core (jobs/core/parts.py with bert_recipe) and driven by a bare loop, each side in
a fresh process. Real tokens are the padding mask's ones of every micro-batch the model ran; padded tokens are
what it ran including padding. The steps after the first --window are timed, by wall clock and by the process's
CPU time (one thread), which other work on the shared machine disturbs less. Rounds alternate which side goes
first; each side's best round counts.

Output: one line per side, `<side> real_tokens_per_sec=.. cpu_real_tokens_per_sec=.. padding=<share of the tokens
run that were padding>`, then `ratio=<lddl / indexed real tokens/s, wall clock> cpu_ratio=<the same by CPU time>
padding_removed=<share of the indexed run's padding per real token that LDDL does not run>`; the goal is ratio > 1.
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

SIDES = ("indexed", "lddl")
FOLDERS = (
    "[" + ",".join(f"${{data_dir}}/tiny_pile_bert/lddl/{split}" for split in ("train", "validation", "test")) + "]"
)
SIDE_OVERRIDES = {
    "indexed": [],
    "lddl": ["model.data.dataloader_type=LDDL", f"model.data.data_prefix={FOLDERS}"],
}
_RESULT = re.compile(r"^real=(\d+) padded=(\d+) seconds=([0-9.]+) cpu=([0-9.]+)$", re.M)


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")


def prepare(work: Path) -> Path:
    """Both data sets, by the launcher on this machine; returns the data_dir."""
    env = _env()
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    argv = [
        sys.executable,
        "main.py",
        "stages=[data_preparation]",
        "data_preparation=bert/tiny_pile_lddl",
        "data_preparation.preprocess_data=True",
        "cluster_type=interactive",
        f"base_results_dir={work / 'prepared'}",
        f"data_dir={work / 'data'}",
    ]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"data preparation failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return work / "data"


def config(side: str, work: Path, data_dir: Path, steps: int) -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / f"{side}.yaml",
        "training",
        "bert/tiny",
        data_dir=data_dir,
        base_results_dir=work / side,
        overrides=[
            f"trainer.max_steps={steps}",
            "trainer.limit_val_batches=0",
            "trainer.limit_test_batches=0",
            "exp_manager.create_checkpoint_callback=false",
            *SIDE_OVERRIDES[side],
        ],
    )


def side_loop(path: Path, window: int) -> None:
    """Runs in its own process: the trainer core's parts for the config, driven step by step; prints the counts."""
    import torch

    from nemo_launcher.contract.schemas.bert_training import BertTrainingConfig
    from nemo_launcher.jobs.bert.recipe import bert_recipe
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.optim import set_hyperparameters
    from nemo_launcher.jobs.core.parts import build_parts, init_processes, shutdown
    from nemo_launcher.jobs.core.samplers import StepBatchSampler, make_loader
    from nemo_launcher.jobs.core.steps import run_microbatches

    cfg = BertTrainingConfig.from_dict(load_resolved_config(path))
    recipe, placement = bert_recipe(cfg), placement_from_env()
    parts = build_parts(recipe, cfg, placement, init_processes(recipe, cfg, placement))
    m = parts.cfg.model
    sampler = StepBatchSampler(len(parts.train_dataset), parts.batches, cfg.trainer.max_steps, lambda: 0, 0)
    loader = make_loader(parts.train_dataset, sampler, 0, parts.on_gpu, m.seed)
    for chunk in parts.ddp_chunks:
        chunk.train()
    real = padded = 0
    started = cpu_started = None
    for step, batch in enumerate(loader):
        microbatches = recipe.split_microbatches(batch, m.micro_batch_size)
        for chunk in parts.ddp_chunks:
            chunk.zero_grad_buffer()
        parts.optimizer.zero_grad()
        losses = run_microbatches(
            parts.ddp_chunks,
            microbatches,
            recipe.forward_step,
            parts.sequences,
            m.micro_batch_size,
            forward_only=False,
            loss_names=recipe.loss_names,
        )
        set_hyperparameters(parts.optimizer, parts.lr_schedule(step), m.optim.weight_decay)
        parts.optimizer.step()
        for value in losses.values():  # wait for the step, as the trainer does at its log points
            value.item()
        if step + 1 == window:
            started, cpu_started = time.perf_counter(), time.process_time()
        elif step + 1 > window:
            real += int(sum(int(torch.count_nonzero(micro["padding_mask"])) for micro in microbatches))
            padded += sum(micro["text"].numel() for micro in microbatches)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    shutdown()
    print(f"real={real} padded={padded} seconds={seconds:.4f} cpu={cpu:.4f}", flush=True)


def run_side(path: Path, window: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-u", __file__, "--side-loop", str(path), "--window", str(window)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    match = _RESULT.search(done.stdout)
    if done.returncode or not match:
        raise SystemExit(f"{path.stem} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    real, padded, seconds, cpu = (float(g) for g in match.groups())
    return {"real": real, "padded": padded, "wall": real / seconds, "cpu": real / cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, default=5, help="steps not timed (start-up, first steps)")
    parser.add_argument("--side-loop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side_loop:
        side_loop(args.side_loop, args.window)
        return 0
    with tempfile.TemporaryDirectory(prefix="lddl_throughput_") as scratch:
        work = Path(scratch)
        data_dir = prepare(work)
        configs = {side: config(side, work, data_dir, args.steps) for side in SIDES}
        best: dict[str, dict] = {}
        for round_number in range(args.rounds):
            for side in SIDES if round_number % 2 == 0 else reversed(SIDES):
                measured = run_side(configs[side], args.window)
                if side not in best or measured["wall"] > best[side]["wall"]:
                    best[side] = measured
    padding = {side: 1 - best[side]["real"] / best[side]["padded"] for side in SIDES}
    for side in SIDES:
        print(
            f"{side} real_tokens_per_sec={best[side]['wall']:.0f} cpu_real_tokens_per_sec={best[side]['cpu']:.0f} "
            f"padding={padding[side]:.3f}"
        )
    per_real = {side: (best[side]["padded"] - best[side]["real"]) / best[side]["real"] for side in SIDES}
    removed = 1 - per_real["lddl"] / per_real["indexed"] if per_real["indexed"] else 0.0
    print(
        f"ratio={best['lddl']['wall'] / best['indexed']['wall']:.3f} "
        f"cpu_ratio={best['lddl']['cpu'] / best['indexed']['cpu']:.3f} padding_removed={removed:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
