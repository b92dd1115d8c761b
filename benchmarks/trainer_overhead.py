"""Tokens/s of our trainer (Lightning loop) against a plain megatron-core loop, per family, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/trainer_overhead.py [--families gpt,t5,bert,dit] [--steps 40] [--rounds 5]

For each family both sides train its tiny model (conf/training/{gpt3,t5,bert,dit}/tiny.yaml) on the same data for
the same steps, from the same parts (nemo_launcher.jobs.core.parts with the family's recipe: model chunks,
megatron DDP, megatron optimizer, dataset, sampler; DiT's build_dit_parts), each in a fresh process. The plain
side is the loop Megatron-LM's pretrain_gpt / pretrain_t5 / pretrain_bert run: fetch a step's batch, zero the grad
buffers, get_forward_backward_func() with the recipe's forward step, set the learning rate, optimizer.step(). Ours
is the family's `python3 -m nemo_launcher.jobs.<family>.train` itself, read from its progress lines, with
checkpoints, validation and the test pass turned off so that only the loop differs. Tokens count as the trainer
counts them (T5: encoder plus decoder tokens; DiT: latent patches). GPT reads a sample corpus written here; T5 and
BERT read what their tiny data preparation writes (run first, on this machine); DiT trains on seed 002's mock
latents. Without --families: GPT, T5 and BERT (benchmarks/dit_overhead.py runs DiT, benchmarks/llama_throughput.py
the tiny Llama or Mixtral, conf/training/{llama,mixtral}/tiny.yaml on llama/tiny_pile's data).

Throughput counts the steps after the first logging window (start-up and first-step costs excluded) on
both sides, per second of wall-clock time and per second of the process's CPU time (one thread: OMP_NUM_THREADS=1,
no loader workers), which other work on a shared machine disturbs far less. Each round runs both sides back to
back (which goes first alternates), so its ratio compares runs under about the same load. Per family and clock
the output gives each side's best round and their ratio, and the median and range of the rounds' own ratios. One
line per family ends it: `<family> ratio=<best ours / best plain, wall-clock> cpu_ratio=<the same by CPU time>
median_ratio=<median of the rounds' wall-clock ratios> median_cpu_ratio=<the same by CPU time>`; the goal is
>= 0.95.
"""

import argparse
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


@dataclasses.dataclass(frozen=True)
class Family:
    train: str  # the training program's module
    config: str  # the tiny training config
    # its tiny data preparation config; "" for GPT's sample corpus, None for a family that trains on mock data
    data_preparation: str | None
    overrides: tuple[str, ...] = ()  # further settings of the tiny config for both sides


FAMILIES = {
    "gpt": Family("nemo_launcher.jobs.gpt.train", "gpt3/tiny", ""),
    "t5": Family("nemo_launcher.jobs.t5.train", "t5/tiny", "t5/tiny_pile"),
    "bert": Family("nemo_launcher.jobs.bert.train", "bert/tiny", "bert/tiny_pile"),
    # The Llama-architecture families run GPT's program; their tiny configs read llama/tiny_pile's tokenizer.json
    # data (benchmarks/llama_throughput.py measures these).
    "llama": Family("nemo_launcher.jobs.gpt.train", "llama/tiny", "llama/tiny_pile"),
    "mixtral": Family("nemo_launcher.jobs.gpt.train", "mixtral/tiny", "llama/tiny_pile"),
    # Seed 002's mock latents and text embeddings (64 tokens a sample, 32 samples a step in 2 microbatches), so no
    # data preparation runs; benchmarks/dit_overhead.py measures this family alone.
    "dit": Family(
        "nemo_launcher.jobs.dit.train", "dit/tiny", None, ("model.data.data_type=mock", "model.data.num_workers=0")
    ),
}
DEFAULT_FAMILIES = ("gpt", "t5", "bert")


def _schema_recipe_and_build(name: str, section):
    """The bound training config, the recipe its train.py would run and the function that builds its parts."""
    from nemo_launcher.jobs.core.parts import build_parts

    if name in ("gpt", "llama", "mixtral"):
        from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
        from nemo_launcher.jobs.gpt.recipe import gpt_recipe

        cfg = TrainingConfig.from_dict(section)
        return cfg, gpt_recipe(cfg), build_parts
    if name == "t5":
        from nemo_launcher.contract.schemas.t5_training import T5TrainingConfig
        from nemo_launcher.jobs.t5.recipe import T5

        return T5TrainingConfig.from_dict(section), T5, build_parts
    if name == "dit":
        from nemo_launcher.contract.schemas.dit_training import DitTrainingConfig
        from nemo_launcher.jobs.dit.recipe import build_dit_parts, dit_recipe

        cfg = DitTrainingConfig.from_dict(section)
        return cfg, dit_recipe(cfg), build_dit_parts
    from nemo_launcher.contract.schemas.bert_training import BertTrainingConfig
    from nemo_launcher.jobs.bert.recipe import bert_recipe

    cfg = BertTrainingConfig.from_dict(section)
    return cfg, bert_recipe(cfg), build_parts


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


@dataclasses.dataclass(frozen=True)
class Throughput:
    wall: float  # tokens per second of wall-clock time
    cpu: float  # tokens per second of the process's CPU time: what other processes on a shared machine disturb least


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ours(family: Family, config: Path, window: int) -> Throughput:
    """Tokens/s of the trainer over all logging windows but the first. Its CPU time is read as each progress line
    arrives (printed and flushed at the log point, while the next step has barely started)."""
    with tempfile.TemporaryFile(mode="w+") as errors:
        child = subprocess.Popen(
            [sys.executable, "-u", "-m", family.train, "--config", str(config)],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        output, cpu = [], {}
        for line in child.stdout:
            output.append(line)
            step = re.match(r"step=(\d+)/", line)
            if step:
                cpu[int(step.group(1))] = _cpu_seconds(child.pid)
        if child.wait():
            errors.seek(0)
            raise SystemExit(f"trainer failed:\n{''.join(output)[-3000:]}\n{errors.read()[-3000:]}")
    lines = re.findall(r"^step=(\d+)/\d+ .*tokens_per_sec=(\d+) step_time=([0-9.]+)s", "".join(output), re.M)
    later = [(int(step), float(tps), float(seconds)) for step, tps, seconds in lines if int(step) > window]
    tokens = sum(tps * seconds * window for _, tps, seconds in later)
    seconds = sum(seconds * window for _, _, seconds in later)
    return Throughput(tokens / seconds, tokens / (cpu[later[-1][0]] - cpu[window]))


def plain(name: str, config: Path, window: int) -> Throughput:
    result = subprocess.run(
        [sys.executable, "-u", __file__, "--plain-loop", str(config), "--family", name, "--window", str(window)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    match = re.search(r"^plain_tokens_per_sec=([0-9.]+) cpu=([0-9.]+)$", result.stdout, re.M)
    if result.returncode or not match:
        raise SystemExit(f"plain loop failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return Throughput(float(match.group(1)), float(match.group(2)))


def drive_parts(recipe, cfg, parts, window: int) -> tuple[int, float, float]:
    """The bare loop over a trainer's parts (no Lightning, no callbacks): (tokens, wall seconds, CPU seconds)
    after the first `window` steps, which warm up and are not timed. The DiT benchmark drives its parts with it."""
    from nemo_launcher.jobs.core.optim import set_hyperparameters
    from nemo_launcher.jobs.core.samplers import StepBatchSampler, make_loader
    from nemo_launcher.jobs.core.steps import run_microbatches

    m = parts.cfg.model
    sampler = StepBatchSampler(len(parts.train_dataset), parts.batches, cfg.trainer.max_steps, lambda: 0, parts.dp_rank)
    loader = make_loader(parts.train_dataset, sampler, m.data.num_workers, parts.on_gpu, m.seed)
    for chunk in parts.ddp_chunks:
        chunk.train()
    tokens, started, cpu_started = 0, None, None
    consumed = 0
    for step, batch in enumerate(loader):
        batch_size = parts.batches.batch_size(consumed)
        for chunk in parts.ddp_chunks:
            chunk.zero_grad_buffer()
        parts.optimizer.zero_grad()
        losses = run_microbatches(
            parts.ddp_chunks,
            recipe.split_microbatches(batch, m.micro_batch_size),
            recipe.forward_step,
            parts.sequences,
            m.micro_batch_size,
            forward_only=False,
            loss_names=recipe.loss_names,
        )
        set_hyperparameters(parts.optimizer, parts.lr_schedule(step), m.optim.weight_decay)
        parts.optimizer.step()
        consumed += batch_size
        if (step + 1) % window == 0:
            for value in losses.values():  # the trainer reads every reported loss at each log point too
                value.item()
        if step + 1 == window:
            started, cpu_started = time.perf_counter(), time.process_time()
        elif step + 1 > window:
            tokens += batch_size * parts.sequences.tokens
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return tokens, seconds, cpu_seconds


def plain_loop(name: str, config: Path, window: int) -> None:
    """Runs in its own process: the same parts as the trainer, driven by a bare loop."""
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.parts import init_processes, shutdown

    cfg, recipe, build = _schema_recipe_and_build(name, load_resolved_config(config))
    placement = placement_from_env()
    parts = build(recipe, cfg, placement, init_processes(recipe, cfg, placement))
    tokens, seconds, cpu_seconds = drive_parts(recipe, cfg, parts, window)
    shutdown()
    print(f"plain_tokens_per_sec={tokens / seconds:.1f} cpu={tokens / cpu_seconds:.1f}", flush=True)


def measure(name: str, work: Path, args) -> dict[str, float]:
    """summarize()'s ratios for one family, by wall-clock and CPU time.

    Each round runs both sides back to back, so a round's ratio compares runs under about the same load from other
    processes, and the median of those drops the rounds a burst of load hit on one side only. Each side's best
    round estimates its undisturbed speed, which is what a load that changes within seconds leaves least touched."""
    from nemo_launcher.launch.stage_config import write_stage_config

    family = FAMILIES[name]
    data_dir = work / "data"
    prepare_data(family, data_dir, work / "results")
    config = write_stage_config(
        work / f"{name}_tiny_hydra.yaml",
        "training",
        family.config,
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=[*_overrides(args.steps, args.window), *family.overrides],
    )
    runs = []  # (plain, ours) per round
    for round_ in range(1, args.rounds + 1):
        # Alternating which side goes first keeps a slow start of a round (page cache, a neighbour's burst) from
        # always landing on the same side.
        if round_ % 2:
            pair = plain(name, config, args.window), ours(family, config, args.window)
        else:
            pair = tuple(reversed((ours(family, config, args.window), plain(name, config, args.window))))
        runs.append(pair)
        print(
            f"{name} round {round_}: plain {pair[0].wall:,.0f} tokens/s ({pair[0].cpu:,.0f} per CPU second), "
            f"ours {pair[1].wall:,.0f} tokens/s ({pair[1].cpu:,.0f} per CPU second), "
            f"ratio {pair[1].wall / pair[0].wall:.3f} (CPU {pair[1].cpu / pair[0].cpu:.3f})",
            flush=True,
        )
    return summarize(name, runs)


def summarize(name: str, runs: Sequence[tuple[Throughput, Throughput]]) -> dict[str, float]:
    """Prints each clock's best-of-rounds throughputs and the median and spread of the rounds' ratios; returns
    {clock: best ours / best plain, "median_" + clock: median of the rounds' ratios}."""
    ratios = {}
    for clock in ("wall", "cpu"):
        best_plain = max(getattr(p, clock) for p, _ in runs)
        best_ours = max(getattr(o, clock) for _, o in runs)
        per_round = sorted(getattr(o, clock) / getattr(p, clock) for p, o in runs)
        ratios[clock], ratios[f"median_{clock}"] = best_ours / best_plain, statistics.median(per_round)
        print(
            f"{name} {clock}: plain {best_plain:,.0f}, ours {best_ours:,.0f} tokens/s (best of {len(runs)}), ratio "
            f"{ratios[clock]:.3f}; median of the rounds' ratios {ratios[f'median_{clock}']:.3f} "
            f"(range {per_round[0]:.3f}-{per_round[-1]:.3f})",
            flush=True,
        )
    return ratios


def prepare_data(family: Family, data_dir: Path, results: Path) -> None:
    if family.data_preparation is None:
        return
    if not family.data_preparation:
        from nemo_launcher.jobs.common.sample_data import build_sample_data

        build_sample_data(data_dir)
        return
    env = _env()
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    result = subprocess.run(
        [
            sys.executable,
            "main.py",
            "stages=[data_preparation]",
            "cluster_type=interactive",
            f"data_preparation={family.data_preparation}",
            f"data_dir={data_dir}",
            f"base_results_dir={results}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise SystemExit(
            f"data preparation {family.data_preparation} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--families", default=",".join(DEFAULT_FAMILIES), help="comma-separated: " + ", ".join(FAMILIES)
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--window", type=int, default=10, help="steps per logging window; the first is not timed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plain-loop", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--family", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from nemo_launcher.jobs.common.quiet import install_warning_filters

    install_warning_filters()  # megatron-core's import-time notes about absent accelerators, as in the job logs
    if args.plain_loop:
        plain_loop(args.family, args.plain_loop, args.window)
        return 0
    if args.steps % args.window or args.steps <= args.window:
        parser.error("--steps must be a multiple of --window and larger than it")
    names = [name.strip() for name in args.families.split(",") if name.strip()]
    unknown = [name for name in names if name not in FAMILIES]
    if unknown or not names:
        parser.error(f"--families: {', '.join(unknown) or 'none given'}; choose from {', '.join(FAMILIES)}")

    with tempfile.TemporaryDirectory(prefix="trainer_overhead_") as scratch:
        work = Path(scratch)
        ratios = {name: measure(name, work, args) for name in names}
    for name, ratio in ratios.items():
        print(
            f"{name} ratio={ratio['wall']:.3f} cpu_ratio={ratio['cpu']:.3f} "
            f"median_ratio={ratio['median_wall']:.3f} median_cpu_ratio={ratio['median_cpu']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
