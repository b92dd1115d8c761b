"""LDDL binning step: BERT sentence pairs from each extracted Pile shard, binned by length, in LDDL's layout.

    python3 -u -m nemo_launcher.jobs.data.lddl_bin --config <job dir>/<run.name>_hydra.yaml

For shard n (a Slurm array task handles its own file number): the documents of `<extracted_dir>/<n>.jsonl` are
cut into sentences (sentences.py) and lower-case WordPiece ids, shuffled and dealt to train/validation/test by
lddl.splits_string, and every document gives its sentence-order pairs (lddl_pairs.py) lddl.duplicate_factor
times. Each pair lands in `<lddl.output_dir>/<split>/shard-<n>.parquet_<bin>`, one file per split and bin (empty
bins too: LDDL needs every bin id from 0 up), with LDDL's columns: A and B as space-joined pieces,
is_random_next (the segments were swapped), num_tokens, bin_id. Each split folder also gets lddl_bins.json
(contract/lddl.py).

Why not the lddl package: lddl 0.1.0 (PyPI, the seed's `pip install git+https://github.com/NVIDIA/lddl.git`)
pins transformers==4.16.2, dask==2021.7.1, mpi4py==3.1.3 and bokeh 2.4.3, which cannot install beside this
project's transformers 5 and NumPy-1 pins; its layout is simple enough to write with pyarrow, already pinned.

Resumable: every file is written under a temporary name and renamed into place, and `.shard-<n>.done.json` in
lddl.output_dir, written last, marks the shard complete; a rerun keeps complete shards and redoes the others.
With rm_extracted and no preprocess step, the jsonl is removed once its shard is complete.
"""

import json
import logging
import os

import numpy as np

from ...contract.lddl import BINS_FILE, SPLITS, LddlBinning, bin_of, read_bins_record, shard_file, shard_marker
from ..common.errors import DataPrepError
from ..common.tokenizer import BatchTokenizer, load_batch_tokenizer
from ..steps.config import StepConfig, run_step, this_task_items
from ..steps.step_report import StepReport
from .lddl_pairs import Pair, document_pairs, split_counts
from .pile_layout import PileLayout, ensure_tokenizer_files, tokenizer_spec
from .sentences import split_sentences

log = logging.getLogger("data.lddl_bin")
_BATCH_DOCUMENTS = 512  # documents per encode_batch call, as the preprocess step batches them


def read_marker(output_dir: str, number: int) -> dict | None:
    try:
        with open(shard_marker(output_dir, number), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write_json(path: str, value: dict) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle, sort_keys=True)
    os.replace(temporary, path)


def _documents(path: str, json_key: str, skip_malformed: bool) -> tuple[list[str], int]:
    """(texts, malformed lines) of a jsonl file."""
    texts, malformed = [], 0
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[json_key]
                if not isinstance(text, str):
                    raise TypeError(f"{json_key} is not a string")
            except (ValueError, KeyError, TypeError) as error:
                if not skip_malformed:
                    raise DataPrepError(f"{path}:{number}: {error}; fix the line or set on_malformed=skip") from None
                malformed += 1
                continue
            texts.append(text)
    return texts, malformed


def _tokenized(texts: list[str], tokenizer: BatchTokenizer, longest: int) -> list[list[np.ndarray]]:
    """Each document as its non-empty sentences' ids; sentences over `longest` ids are cut into pieces of it."""
    documents = []
    for first in range(0, len(texts), _BATCH_DOCUMENTS):
        sentences, owners = [], []
        for position, text in enumerate(texts[first : first + _BATCH_DOCUMENTS]):
            pieces = split_sentences(text)
            sentences += pieces
            owners += [position] * len(pieces)
        tokens, lengths, _ = tokenizer.encode_batch(sentences)
        batch: list[list[np.ndarray]] = [[] for _ in range(min(_BATCH_DOCUMENTS, len(texts) - first))]
        for owner, ids in zip(owners, np.split(tokens.astype(np.int64), np.cumsum(lengths)[:-1])):
            batch[owner] += [ids[i : i + longest] for i in range(0, len(ids), longest)]
        documents += [sentences for sentences in batch if sentences]
    return documents


def shard_pairs(documents: list[list[np.ndarray]], binning: LddlBinning, number: int) -> dict[str, list[Pair]]:
    """{split: pairs} of one shard: documents shuffled and dealt by splits_string, each cut duplicate_factor
    times. Seeded by (lddl.seed, file number): a rerun of the shard writes the same rows."""
    rng = np.random.default_rng([binning.seed, number])
    order = rng.permutation(len(documents))
    counts = split_counts(binning.splits_string, len(documents))
    bounds = np.cumsum([0, *counts])
    pairs: dict[str, list[Pair]] = {}
    for split, start, end in zip(SPLITS, bounds[:-1], bounds[1:]):
        pairs[split] = [
            pair
            for _ in range(binning.duplicate_factor)
            for index in order[start:end]
            for pair in document_pairs(documents[index], binning.target_seq_length, binning.short_seq_prob, rng)
        ]
    return pairs


def _pieces(vocab_file: str) -> list[str]:
    with open(vocab_file, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def _write_bins(folder: str, number: int, pairs: list[Pair], binning: LddlBinning, pieces: list[str]) -> list[int]:
    """One parquet file per bin (LDDL's columns); returns the rows of each bin."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    by_bin: list[list[Pair]] = [[] for _ in range(binning.bins)]
    for pair in pairs:
        by_bin[bin_of(pair.num_tokens, binning.bin_size, binning.bins)].append(pair)
    # LDDL's columns and types (its preprocessor's parquet schema, bin_id added by its binning).
    schema = pa.schema(
        [
            ("A", pa.string()),
            ("B", pa.string()),
            ("is_random_next", pa.bool_()),
            ("num_tokens", pa.uint16()),
            ("bin_id", pa.int64()),
        ]
    )
    for bin_id, rows in enumerate(by_bin):
        table = pa.table(
            {
                "A": [" ".join(pieces[i] for i in pair.a) for pair in rows],
                "B": [" ".join(pieces[i] for i in pair.b) for pair in rows],
                "is_random_next": [pair.swapped for pair in rows],
                "num_tokens": [pair.num_tokens for pair in rows],
                "bin_id": [bin_id] * len(rows),
            },
            schema=schema,
        )
        path = os.path.join(folder, shard_file(number, bin_id))
        temporary = os.path.join(folder, f".{shard_file(number, bin_id)}.tmp-{os.getpid()}")
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    return [len(rows) for rows in by_bin]


def _check_folder_record(folder: str, binning: LddlBinning) -> None:
    """A split folder that already holds another binning's shards would mix two bin sizes."""
    record = read_bins_record(folder)
    if record is not None and record != binning.record():
        raise DataPrepError(
            f"{folder} holds LDDL bins written with {record}, not {binning.record()}; give data_preparation.lddl."
            "output_dir a new folder, or empty this one"
        )


def bin_shard(cfg: StepConfig, number: int, extracted: str, tokenizer: BatchTokenizer, pieces: list[str]) -> dict:
    """Writes shard `number`'s files in every split folder and its marker; returns what the marker records."""
    pile, binning = cfg.bound, cfg.bound.lddl
    texts, malformed = _documents(extracted, pile.json_key, pile.on_malformed == "skip")
    documents = _tokenized(texts, tokenizer, binning.target_seq_length - 3)
    pairs = shard_pairs(documents, binning, number)
    rows = {}
    for split, folder in zip(SPLITS, binning.split_dirs()):
        _check_folder_record(folder, binning)
        rows[split] = _write_bins(folder, number, pairs[split], binning, pieces)
        _write_json(os.path.join(folder, BINS_FILE), binning.record())
    tokens = sum(pair.num_tokens for split_pairs in pairs.values() for pair in split_pairs)
    done = {"documents": len(documents), "malformed": malformed, "rows": rows, "tokens": tokens}
    _write_json(shard_marker(binning.output_dir, number), done)
    return done


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("lddl_bin", argv)
    pile = cfg.bound
    if getattr(pile, "lddl", None) is None:
        raise DataPrepError("data_preparation.lddl is null: this step bins Pile shards for LDDL; set the section")
    binning, layout = pile.lddl, PileLayout(cfg)
    report = StepReport("lddl_bin", unit="shard")
    ensure_tokenizer_files(cfg)
    tokenizer, pieces = None, None
    for number in this_task_items(pile.shard_numbers()):
        shard = layout.shard(number)
        done = read_marker(binning.output_dir, number)
        if done is not None:
            log.info("shard %d: LDDL bins complete (%s)", number, shard_marker(binning.output_dir, number))
            report.kept(number, output=binning.output_dir, documents=done["documents"], tokens=done["tokens"])
        else:
            if not os.path.isfile(shard.extracted):
                raise DataPrepError(
                    f"shard {number}: {shard.extracted} not found; run the download and extract steps "
                    "(data_preparation.download_the_pile=True)"
                )
            if tokenizer is None:
                tokenizer, pieces = load_batch_tokenizer(tokenizer_spec(cfg)), _pieces(pile.vocab_file)
            size = os.path.getsize(shard.extracted)
            done = bin_shard(cfg, number, shard.extracted, tokenizer, pieces)
            log.info("shard %d: %s pairs per split and bin", number, done["rows"])
            report.done(number, binning.output_dir, size, documents=done["documents"], tokens=done["tokens"])
            if done["malformed"]:
                report.note("malformed lines", f"{done['malformed']} skipped in {shard.extracted}")
        if pile.rm_extracted and not pile.preprocess_data and os.path.isfile(shard.extracted):
            os.remove(shard.extracted)
    return report


if __name__ == "__main__":
    run_step(main)
