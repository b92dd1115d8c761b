"""Image-text samples/s of our WebDataset loader as it feeds the CLIP trainer, against a plain `webdataset`
pipeline over the same shards, in one run.

    OMP_NUM_THREADS=1 python3 benchmarks/clip_loader_throughput.py [--examples 3200] [--batches 60] [--rounds 3]

Shards: --examples generated coloured shapes with captions (jobs/multimodal/shapes.py) as 256 x 256 JPEGs, 100
examples a tar, written once into a temporary folder. Both sides read them with the same number of worker
processes (--workers) into batches of global_batch_size pairs, and turn each example into what the trainer consumes
with the same code (jobs/clip/recipe.py's PairEncoder: decode, a random crop to the configured size, CLIP's
normalisation, the caption's tokens), so they differ only in how examples are found and handed out:
- ours: the training DataLoader the CLIP trainer builds (jobs/core/module.py: the core's StepBatchSampler over
  clip_datasets' ShardExamples, make_loader), for the clip/tiny config at 224 x 224 pixels, patches of 32;
- plain: what a webdataset user writes: WebDataset(shards, shardshuffle, split by worker) -> shuffle(buffer) ->
  map(encode) -> batched(global batch) in a WebLoader with the same workers.
Each side runs in a fresh process; the first --warmup batches (worker start, first shards) are not timed. Samples
are counted per second of wall-clock and per second of CPU time of the process and its workers (which other work
on a shared machine disturbs far less). Sides alternate which goes first; the best round of each is compared. The
last line is `ratio=<ours / plain, wall-clock> cpu_ratio=<the same by CPU time>`; the goal is >= 0.95.
"""

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PER_TAR = 100
IMAGE_SIZE = 256  # pixels of the stored JPEGs (the crop is the model's 224)
OVERRIDES = ["model.vision.img_h=224", "model.vision.img_w=224", "model.vision.patch_dim=32"]


def write_shards(folder: Path, examples: int) -> None:
    from nemo_launcher.jobs.multimodal.shapes import shape_example
    from nemo_launcher.jobs.multimodal.tars import AtomicTar

    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, examples, PER_TAR):
        with AtomicTar(str(folder / f"{start // PER_TAR:05d}.tar")) as tar:
            for index in range(start, min(start + PER_TAR, examples)):
                image, caption, _ = shape_example(index, 0, IMAGE_SIZE)
                encoded = io.BytesIO()
                image.save(encoded, format="JPEG", quality=95)
                tar.write({"__key__": f"{index:09d}", "jpg": encoded.getvalue(), "txt": caption.encode()})


def _config(work: Path, shards: Path, batch: int, workers: int, steps: int) -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / "clip_loader_hydra.yaml",
        "training",
        "clip/tiny",
        data_dir=work / "data",
        base_results_dir=work / "results",
        overrides=[
            *OVERRIDES,
            f"model.data.train.dataset_path=[{shards}]",
            f"model.data.num_workers={workers}",
            f"model.micro_batch_size={batch}",
            f"model.global_batch_size={batch}",
            f"trainer.max_steps={steps}",
        ],
    )


def _bound(config: Path):
    from nemo_launcher.contract.schemas.clip_training import ClipTrainingConfig
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.multimodal.caption_tokenizer import load_clip_tokenizer

    cfg = ClipTrainingConfig.from_dict(load_resolved_config(config))
    return cfg, load_clip_tokenizer(cfg.model.tokenizer)


def ours_loader(config: Path):
    """The loader jobs/core/module.py's train_dataloader builds for this config (one data-parallel rank)."""
    from nemo_launcher.jobs.clip.recipe import clip_datasets
    from nemo_launcher.jobs.core.datasets import dataset_sizes
    from nemo_launcher.jobs.core.samplers import StepBatchSampler, make_loader
    from nemo_launcher.jobs.core.schedule import BatchSchedule

    cfg, tokenizer = _bound(config)
    m = cfg.model
    batches = BatchSchedule(m.global_batch_size, m.micro_batch_size, 1, None)
    train, _, _ = clip_datasets(cfg, tokenizer, dataset_sizes(cfg, batches))
    sampler = StepBatchSampler(
        len(train),
        batches,
        cfg.trainer.max_steps,
        start_step=lambda: 0,
        dp_rank=0,
        shuffle_seed=m.seed if m.data.dataloader_type == "cyclic" else None,
    )
    return make_loader(train, sampler, m.data.num_workers, False, m.seed)


class _Counted:
    """The trainer's encoder with a running sample number (ours passes the run's sample number for the crop)."""

    def __init__(self, encode):
        self.encode, self.count = encode, 0

    def __call__(self, sample):
        self.count += 1
        return self.encode(sample, self.count)


def plain_loader(config: Path, shuffle_buffer: int):
    import torch
    import webdataset as wds

    from nemo_launcher.jobs.clip.recipe import PairEncoder
    from nemo_launcher.jobs.vision.shards import list_shards

    cfg, tokenizer = _bound(config)
    m = cfg.model
    urls = [shard.path for shard in list_shards(m.data.train.dataset_path, "model.data.train.dataset_path")]
    dataset = (
        wds.WebDataset(
            urls,
            shardshuffle=len(urls),
            nodesplitter=wds.single_node_only,
            workersplitter=wds.split_by_worker,
            seed=m.seed,
            empty_check=False,
        )
        .repeat()
        .shuffle(shuffle_buffer)
        .map(_Counted(PairEncoder(m, tokenizer, train=True)))
        .batched(m.global_batch_size, collation_fn=torch.utils.data.default_collate)
    )
    return wds.WebLoader(dataset, batch_size=None, num_workers=m.data.num_workers)


def _cpu_seconds() -> float:
    """CPU time of this process and its live children (the loader's workers), user and system."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def measure(side: str, config: Path, batches: int, warmup: int, shuffle_buffer: int) -> None:
    """Runs in its own process: samples per second of wall-clock and of CPU time (this process and its workers)
    over `batches` batches after `warmup` untimed ones."""
    from nemo_launcher.jobs.common.quiet import install_warning_filters

    install_warning_filters()
    loader = ours_loader(config) if side == "ours" else plain_loader(config, shuffle_buffer)
    samples, started, cpu_started = 0, None, None
    for number, batch in enumerate(loader, start=1):
        assert batch["images"].shape[1:] == (3, 224, 224) and batch["tokens"].dim() == 2
        if number == warmup:
            started, cpu_started = time.perf_counter(), _cpu_seconds()
        elif number > warmup:
            samples += batch["images"].shape[0]
        if number == warmup + batches:
            # Before leaving the loop: a loader without persistent workers stops them when its iterator goes.
            wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
            break
    print(f"samples_per_sec={samples / wall:.2f} {samples / cpu:.2f}", flush=True)


def run_side(side: str, config: Path, args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-u",
            __file__,
            "--measure",
            side,
            "--config",
            str(config),
            "--batches",
            str(args.batches),
            "--warmup",
            str(args.warmup),
            "--shuffle-buffer",
            str(args.shuffle_buffer),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith("samples_per_sec=") and not result.returncode:
            wall, cpu = line.split("=", 1)[1].split()
            return float(wall), float(cpu)
    raise SystemExit(f"{side} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=3200)
    parser.add_argument("--batch", type=int, default=32, help="global batch (pairs per step, one rank)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes on both sides")
    parser.add_argument("--batches", type=int, default=60, help="timed batches per side and round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shuffle-buffer", type=int, default=500, help="the plain pipeline's shuffle buffer (samples)")
    parser.add_argument("--measure", choices=("ours", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.config, args.batches, args.warmup, args.shuffle_buffer)
        return 0
    with tempfile.TemporaryDirectory(prefix="clip_loader_") as scratch:
        work = Path(scratch)
        write_shards(work / "shards", args.examples)
        config = _config(work, work / "shards", args.batch, args.workers, steps=10 * (args.batches + args.warmup))
        best = {side: [0.0, 0.0] for side in ("ours", "plain")}  # [wall, cpu] samples/s
        for round_ in range(1, args.rounds + 1):
            order = ("ours", "plain") if round_ % 2 else ("plain", "ours")
            measured = {side: run_side(side, config, args) for side in order}
            print(
                f"round {round_}: plain webdataset {measured['plain'][0]:,.1f} samples/s "
                f"({measured['plain'][1]:,.1f} per CPU second), ours {measured['ours'][0]:,.1f} samples/s "
                f"({measured['ours'][1]:,.1f} per CPU second)",
                flush=True,
            )
            best = {side: [max(b, m) for b, m in zip(best[side], measured[side])] for side in best}
    for side, name in (("plain", "plain webdataset pipeline"), ("ours", "our loader (CLIP trainer)")):
        print(
            f"{name}: {best[side][0]:,.1f} image-text samples/s, {best[side][1]:,.1f} per CPU second "
            f"(best of {args.rounds})"
        )
    print(f"ratio={best['ours'][0] / best['plain'][0]:.3f} cpu_ratio={best['ours'][1] / best['plain'][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
