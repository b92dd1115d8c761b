"""Tokenize one jsonl file into one Megatron dataset (`<prefix>.bin` + `<prefix>.idx`), with several workers.

    summary = build_shard(ShardJob(input_path="00.jsonl", output_prefix="out/my-gpt3_00_text_document"),
                          TokenizerSpec(...), workers=4)

The file is cut into line-aligned byte ranges (chunks). Workers encode chunks in any order and write each one
to a hidden `.<name>.parts/` folder beside the output; when every chunk is there, the chunk files are joined
in file order and the index is written, both under temporary names, then renamed (.bin first, .idx last).
Document order is the file's order, so the output equals encoding the lines one by one. With split_sentences
every document is a run of sentence items (what megatron-core's BERT and T5 datasets sample from).

Resumable at every point: a complete dataset is skipped; chunks a killed run finished are kept (the chunk
plan is stored and reused while the input is unchanged); temporary files are never mistaken for results.
"""

import concurrent.futures
import json
import logging
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from ..common.errors import DataPrepError
from ..common.tokenizer import TokenizerSpec, load_batch_tokenizer
from . import chunk_encoder
from .chunk_encoder import ChunkResult, ChunkTask, MalformedLine
from .indexed_format import complete_dataset, concatenate, read_index_header, write_index

log = logging.getLogger(__name__)

ON_MALFORMED = ("skip", "fail")
_REPORTED_LINES = 20  # malformed lines printed with file:line per shard; the rest are counted


class MalformedInput(DataPrepError):
    """Input with a malformed line under on_malformed=fail; the message is `file:line: reason`."""


class EmptyInput(DataPrepError):
    """Input that yields no document while allow_empty_shards is false: a training on the empty dataset it would
    make passes every check and then fails far from here, naming no file."""


@dataclass(frozen=True)
class ShardJob:
    input_path: str  # a jsonl file (one JSON object per line)
    output_prefix: str  # writes <output_prefix>.bin and <output_prefix>.idx
    json_key: str = "text"
    on_malformed: str = "skip"
    append_eod: bool = True
    chunk_bytes: int = 32 << 20  # input bytes per chunk: the unit of work, of progress and of resumption
    split_sentences: bool = False  # one item per sentence (BERT, T5) instead of one per document (GPT)
    max_sentence_tokens: int | None = None  # longer sentences become several items of at most this many tokens
    allow_empty: bool = False  # write an empty dataset for input with no document instead of failing
    source: str = ""  # `key=value` the user typed for this input, for messages (default: input=<input_path>)


@dataclass(frozen=True)
class ShardSummary:
    output_prefix: str
    documents: int
    tokens: int
    bytes: int
    seconds: float
    malformed: int = 0
    skipped: bool = False  # True when a previous run had already finished this shard
    items: int = 0  # indexed items: one per document, or one per sentence with split_sentences

    def line(self) -> str:
        if self.skipped:
            return f"{self.output_prefix}: already complete ({self.documents} documents, {self.tokens} tokens), skipped"
        rate = self.tokens / self.seconds if self.seconds > 0 else float("inf")
        return (
            f"{self.output_prefix}: {self.documents} documents, {self.tokens} tokens, "
            f"{self.bytes / 1e6:.1f} MB in {self.seconds:.1f} s ({rate / 1e6:.2f} M tokens/s, "
            f"{self.bytes / 1e6 / max(self.seconds, 1e-9):.1f} MB/s), {self.malformed} malformed lines"
        )


def parts_dir_for(prefix: str) -> str:
    head, name = os.path.split(prefix)
    return os.path.join(head, f".{name}.parts")


def build_shard(job: ShardJob, spec: TokenizerSpec, workers: int = 1, progress: bool = True) -> ShardSummary:
    if job.on_malformed not in ON_MALFORMED:
        raise DataPrepError(f"on_malformed={job.on_malformed!r}: expected one of {', '.join(ON_MALFORMED)}")
    done = complete_dataset(job.output_prefix)
    if done is not None:
        summary = ShardSummary(
            job.output_prefix,
            done[0],
            done[1],
            0,
            0.0,
            skipped=True,
            items=read_index_header(job.output_prefix + ".idx")[1],
        )
        log.info(summary.line())
        return summary
    if not os.path.isfile(job.input_path):
        raise DataPrepError(f"{job.input_path}: input file not found (and {job.output_prefix}.idx is not complete)")
    began = time.perf_counter()
    parts_dir = parts_dir_for(job.output_prefix)
    bounds = _chunk_plan(job, parts_dir)
    tasks = [
        ChunkTask(
            job.input_path,
            index,
            start,
            end,
            parts_dir,
            job.json_key,
            job.on_malformed,
            job.append_eod,
            job.split_sentences,
            job.max_sentence_tokens,
        )
        for index, (start, end) in enumerate(bounds)
    ]
    results = {task.index: chunk_encoder.read_result(parts_dir, task.index) for task in tasks}
    finished = {index: result for index, result in results.items() if result is not None}
    pending = [task for task in tasks if task.index not in finished]
    if finished:
        log.info("%s: resuming, %d of %d chunks already done", job.output_prefix, len(finished), len(tasks))
    total_bytes = bounds[-1][1] if bounds else 0
    try:
        _run_chunks(pending, finished, spec, workers, progress, total_bytes, os.path.basename(job.input_path))
    except MalformedLine as error:
        line = _absolute_line(job.input_path, bounds, finished, error.chunk, error.line)
        raise MalformedInput(f"{job.input_path}:{line}: {error.reason} (on_malformed=fail)") from None
    ordered = [finished[task.index] for task in tasks]
    _report_malformed(job.input_path, ordered)
    if not job.allow_empty and not any(result.documents for result in ordered):
        shutil.rmtree(parts_dir, ignore_errors=True)  # nothing worth resuming: the outcome is the same next time
        raise EmptyInput(_empty_message(job, ordered, total_bytes))
    documents, tokens = _assemble(job, spec, parts_dir, ordered)
    shutil.rmtree(parts_dir, ignore_errors=True)
    summary = ShardSummary(
        job.output_prefix,
        documents,
        tokens,
        total_bytes,
        time.perf_counter() - began,
        malformed=sum(result.malformed for result in ordered),
        items=read_index_header(job.output_prefix + ".idx")[1],
    )
    log.info(summary.line())
    return summary


def _chunk_plan(job: ShardJob, parts_dir: str) -> list[tuple[int, int]]:
    """Line-aligned byte ranges of the input, reused from a previous run of the same input and settings."""
    stat = os.stat(job.input_path)
    identity = {
        "input": os.path.abspath(job.input_path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "chunk_bytes": job.chunk_bytes,
        "json_key": job.json_key,
        "append_eod": job.append_eod,
    }
    if job.split_sentences:  # (absent for documents, so plans of earlier runs stay valid)
        identity.update(split_sentences=True, max_sentence_tokens=job.max_sentence_tokens)
    plan_path = os.path.join(parts_dir, "plan.json")
    stored = _stored_plan(plan_path)
    if stored is not None:
        if stored["identity"] == identity:
            return [tuple(item) for item in stored["bounds"]]
        log.info("%s: input or settings changed since the interrupted run; starting over", job.output_prefix)
    shutil.rmtree(parts_dir, ignore_errors=True)
    os.makedirs(parts_dir)
    bounds = _line_aligned_bounds(job.input_path, stat.st_size, job.chunk_bytes)
    temporary = f"{plan_path}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        json.dump({"identity": identity, "bounds": bounds}, handle)
    os.replace(temporary, plan_path)
    return bounds


def _stored_plan(plan_path: str) -> dict | None:
    """The plan an interrupted run wrote, or None when there is none or it cannot be read (then the work starts
    over: a half-written or foreign file must not decide which chunks are done)."""
    try:
        with open(plan_path) as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or "identity" not in stored or "bounds" not in stored:
        return None
    return stored


def _line_aligned_bounds(path: str, size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    bounds = []
    start = 0
    with open(path, "rb") as handle:
        while start < size:
            target = start + max(1, chunk_bytes)
            if target >= size:
                end = size
            else:
                handle.seek(target - 1)
                handle.readline()  # runs to the end of the line holding byte target-1
                end = handle.tell()
            bounds.append((start, end))
            start = end
    return bounds


def _run_chunks(
    pending: list[ChunkTask],
    finished: dict,
    spec: TokenizerSpec,
    workers: int,
    progress: bool,
    total_bytes: int,
    name: str,
) -> None:
    done_bytes = sum(result.bytes for result in finished.values())
    bar = tqdm(
        total=total_bytes,
        initial=done_bytes,
        unit="B",
        unit_scale=True,
        desc=name,
        disable=not progress,
        mininterval=2.0,
        dynamic_ncols=True,
    )
    documents = sum(result.documents for result in finished.values())
    tokens = sum(result.tokens for result in finished.values())
    started = time.perf_counter()

    def record(result: ChunkResult) -> None:
        nonlocal documents, tokens
        finished[result.index] = result
        documents += result.documents
        tokens += result.tokens
        elapsed = max(time.perf_counter() - started, 1e-9)
        bar.set_postfix(
            docs=documents,
            docs_per_s=f"{documents / elapsed:.0f}",
            tokens_per_s=f"{tokens / elapsed:.3g}",
            refresh=False,
        )
        bar.update(result.bytes)

    try:
        if workers <= 1 or len(pending) <= 1:
            # In-process: no worker start-up cost for small inputs, and one core is all it would use anyway.
            tokenizer = load_batch_tokenizer(spec)
            for task in pending:
                record(chunk_encoder.encode_chunk(task, tokenizer))
            return
        # spawn, not fork: the parent may hold threads (tqdm's monitor, tokenizer pools) that fork would copy
        # in a locked state; workers import numpy and tokenizers only, so start-up stays well under a second.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            min(workers, len(pending)), mp_context=context, initializer=chunk_encoder.init_worker, initargs=(spec,)
        ) as pool:
            futures = [pool.submit(chunk_encoder.encode_chunk, task) for task in pending]
            try:
                for future in concurrent.futures.as_completed(futures):
                    record(future.result())
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        bar.close()


def _absolute_line(path: str, bounds, finished: dict, chunk: int, line: int) -> int:
    """Line number in the file of line `line` of chunk `chunk`."""
    if all(index in finished for index in range(chunk)):
        return sum(finished[index].lines for index in range(chunk)) + line
    before = 0
    with open(path, "rb") as handle:  # error path only: count the newlines before the chunk
        remaining = bounds[chunk][0]
        while remaining:
            block = handle.read(min(remaining, 16 << 20))
            before += block.count(b"\n")
            remaining -= len(block)
    return before + line


def _report_malformed(path: str, ordered: list[ChunkResult]) -> None:
    total = sum(result.malformed for result in ordered)
    if not total:
        return
    offset = 0
    reported = 0
    for result in ordered:
        for line, reason in result.reasons:
            if reported < _REPORTED_LINES:
                log.warning("%s:%d: %s (skipped)", path, offset + line, reason)
                reported += 1
        offset += result.lines
    log.warning(
        "%s: %d malformed lines skipped%s", path, total, f" ({total - reported} not listed)" if total > reported else ""
    )


def _empty_message(job: ShardJob, ordered: list[ChunkResult], total_bytes: int) -> str:
    if total_bytes == 0:
        why = "the file is empty (0 bytes)"
    else:
        lines = sum(result.lines for result in ordered)
        counts = {
            "malformed": sum(result.malformed for result in ordered),
            "blank": sum(result.blank for result in ordered),
            "with no token": sum(result.empty for result in ordered),
        }
        why = f"0 documents from {lines} lines: " + ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return (
        f"{job.source or f'input={job.input_path}'}: {why}; give it JSON lines with a string under "
        f"json_key {job.json_key!r}, leave it out, or set data_preparation.allow_empty_shards=true to write an "
        f"empty dataset for it anyway"
    )


def _assemble(job: ShardJob, spec: TokenizerSpec, parts_dir: str, ordered: list[ChunkResult]) -> tuple[int, int]:
    """Join the chunk files into the dataset; .bin is renamed before .idx, so a present .idx means complete."""
    dtype = load_batch_tokenizer(spec).dtype
    bins, lengths, counts = [], [], []
    for result in ordered:
        bin_path, lengths_path, _ = chunk_encoder.chunk_paths(parts_dir, result.index)
        bins.append(bin_path)
        lengths.append(np.fromfile(lengths_path, dtype=np.int32))
        if job.split_sentences:
            counts.append(np.fromfile(chunk_encoder.sentence_counts_path(parts_dir, result.index), dtype=np.int64))
    item_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
    sentences_per_document = (
        (np.concatenate(counts) if counts else np.zeros(0, np.int64)) if job.split_sentences else None
    )
    tokens = int(item_lengths.sum(dtype=np.int64))
    os.makedirs(os.path.dirname(os.path.abspath(job.output_prefix)), exist_ok=True)
    suffix = ".tmp"  # fixed: a rerun after kill -9 overwrites the partial join instead of leaving it behind
    bin_temp, idx_temp = job.output_prefix + ".bin" + suffix, job.output_prefix + ".idx" + suffix
    concatenate(bins, bin_temp)
    if os.path.getsize(bin_temp) != tokens * dtype.itemsize:
        raise DataPrepError(
            f"{job.output_prefix}: chunk files hold {os.path.getsize(bin_temp)} bytes, "
            f"the lengths say {tokens * dtype.itemsize}; delete {parts_dir} and rerun"
        )
    write_index(idx_temp, dtype, item_lengths, sentences_per_document)
    os.replace(bin_temp, job.output_prefix + ".bin")
    os.replace(idx_temp, job.output_prefix + ".idx")
    documents = item_lengths.size if sentences_per_document is None else sentences_per_document.size
    return int(documents), tokens
