"""One worker's job: turn a byte range of a jsonl file into a finished chunk of tokens on disk.

    init_worker(spec)                       # once per worker process: load the tokenizer
    result = encode_chunk(task)             # reads task.start..task.end, writes chunk-<i>.{bin,lengths,json}

The worker reads its own bytes from the file and writes its own output files, so nothing but a small task
and a small result crosses between processes (Megatron-LM's tool pickles every document's token list back to
one writer process). With split_sentences each document becomes its sentences (sentences.py), one item each,
and chunk-<i>.sentences holds the number of items of each document (the layout BERT and T5 datasets read). The
`.json` file is renamed into place last and marks the chunk as complete: a run that is killed leaves at most
temporary files behind, and the next run redoes only chunks without a `.json`.
"""

import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..common.errors import DataPrepError
from ..common.tokenizer import BatchTokenizer, TokenizerSpec, load_batch_tokenizer
from .sentences import split_sentences

_BATCH_DOCUMENTS = 512  # documents per encode_batch call: amortizes the call, bounds the memory of one batch
_KEPT_REASONS = 100  # malformed lines described per chunk; further ones are only counted

_tokenizer: BatchTokenizer | None = None


class MalformedLine(DataPrepError):
    """A line that is not a JSON object with a string under the text key, with on_malformed=fail.

    Carries the chunk and the line within it; the caller turns that into `file:line` for the message.
    """

    def __init__(self, chunk: int, line: int, reason: str):
        super().__init__(chunk, line, reason)
        self.chunk, self.line, self.reason = chunk, line, reason

    def __str__(self) -> str:
        return f"chunk {self.chunk} line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ChunkTask:
    input_path: str
    index: int  # chunk number within the shard; output files are named after it
    start: int  # first byte (a line start)
    end: int  # one past the last byte (a line start, or the file size)
    parts_dir: str
    json_key: str = "text"
    on_malformed: str = "skip"  # skip: report and leave the line out; fail: stop at the first one
    append_eod: bool = True  # with split_sentences: EOD ends the last sentence of each document
    split_sentences: bool = False  # one item per sentence instead of one per document
    max_sentence_tokens: int | None = None  # longer sentences are cut into items of at most this many tokens


@dataclass
class ChunkResult:
    index: int
    documents: int = 0
    tokens: int = 0
    lines: int = 0
    bytes: int = 0
    blank: int = 0  # empty or whitespace-only lines, skipped silently
    empty: int = 0  # documents whose text encodes to no token, left out (an EOD alone carries nothing)
    sentences: int = 0  # items written (with split_sentences; else one per document)
    malformed: int = 0
    reasons: list[tuple[int, str]] = field(default_factory=list)  # (line within the chunk, what is wrong)
    seconds: float = 0.0


def chunk_paths(parts_dir: str, index: int) -> tuple[str, str, str]:
    stem = os.path.join(parts_dir, f"chunk-{index:06d}")
    return stem + ".bin", stem + ".lengths", stem + ".json"


def sentence_counts_path(parts_dir: str, index: int) -> str:
    return os.path.join(parts_dir, f"chunk-{index:06d}.sentences")


def read_result(parts_dir: str, index: int) -> ChunkResult | None:
    """The result of a chunk a previous run completed, or None."""
    marker = chunk_paths(parts_dir, index)[2]
    try:
        with open(marker) as handle:
            values = json.load(handle)
    except (OSError, ValueError):
        return None
    values["reasons"] = [tuple(item) for item in values["reasons"]]
    return ChunkResult(**values)


def init_worker(spec: TokenizerSpec) -> None:
    global _tokenizer
    _tokenizer = load_batch_tokenizer(spec)


def encode_chunk(task: ChunkTask, tokenizer: BatchTokenizer | None = None) -> ChunkResult:
    tokenizer = tokenizer or _tokenizer
    assert tokenizer is not None, "init_worker() must run in this process first"
    began = time.perf_counter()
    with open(task.input_path, "rb") as handle:
        handle.seek(task.start)
        data = handle.read(task.end - task.start)
    result = ChunkResult(index=task.index, bytes=len(data))
    texts, lines = _parse(data, task, result)
    if task.split_sentences:
        tokens, lengths, counts = _encode_sentences(texts, lines, task, tokenizer, result)
    else:
        tokens, lengths = _encode_documents(texts, lines, task, tokenizer, result)
        counts = None
    result.tokens = int(tokens.size)
    result.sentences = int(lengths.size)
    _write(task, tokens.astype(tokenizer.dtype, copy=False), lengths.astype(np.int32), counts, result, began)
    return result


def _encode_documents(texts, lines, task: ChunkTask, tokenizer: BatchTokenizer, result: ChunkResult):
    """(tokens, tokens per document): one item per document."""
    token_parts, length_parts = [], []
    rejected = 0
    for first in range(0, len(texts), _BATCH_DOCUMENTS):
        tokens, lengths, errors = tokenizer.encode_batch(texts[first : first + _BATCH_DOCUMENTS])
        for position, reason in sorted(errors.items()):
            _malformed(result, task, lines[first + position], reason)
        rejected += len(errors)
        token_parts.append(tokens)
        length_parts.append(lengths)
    tokens = np.concatenate(token_parts) if token_parts else np.zeros(0, tokenizer.dtype)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    kept = lengths[lengths > 0]
    # Rejected documents have length 0 too but are already counted as malformed.
    result.empty = int(lengths.size - kept.size) - rejected
    if task.append_eod:
        # Insert EOD after each document: np.insert at the running end offsets does it in one pass.
        tokens = np.insert(tokens, np.cumsum(kept), np.array(tokenizer.eod, dtype=tokens.dtype))
        kept = kept + 1
    result.documents = int(kept.size)
    return tokens, kept


def _encode_sentences(texts, lines, task: ChunkTask, tokenizer: BatchTokenizer, result: ChunkResult):
    """(tokens, tokens per item, items per document): one item per sentence with at least one token.

    A document whose sentences all encode to nothing is left out (counted as empty); one the tokenizer rejects
    anywhere is left out whole (malformed). EOD, when appended, ends the document's last sentence; sentences
    longer than max_sentence_tokens are then cut into items of that many tokens and a shorter last one.
    """
    token_parts, length_parts, count_parts = [], [], []
    for first in range(0, len(texts), _BATCH_DOCUMENTS):
        batch = texts[first : first + _BATCH_DOCUMENTS]
        sentences, owners = [], []
        for position, text in enumerate(batch):
            pieces = split_sentences(text)
            sentences += pieces
            owners += [position] * len(pieces)
        tokens, lengths, errors = tokenizer.encode_batch(sentences)
        owner = np.asarray(owners, dtype=np.int64)
        rejected = np.zeros(len(batch), dtype=bool)
        for index, reason in sorted(errors.items()):
            if not rejected[owner[index]]:
                rejected[owner[index]] = True
                _malformed(result, task, lines[first + owner[index]], reason)
        keep = (lengths > 0) & ~rejected[owner] if owner.size else np.zeros(0, dtype=bool)
        tokens = tokens[np.repeat(keep, lengths)]
        lengths, owner = lengths[keep], owner[keep]
        counts = np.bincount(owner, minlength=len(batch))
        result.empty += int(np.count_nonzero((counts == 0) & ~rejected))
        counts = counts[counts > 0]
        if task.append_eod and counts.size:
            last = np.cumsum(counts) - 1  # each document's last sentence
            tokens = np.insert(tokens, np.cumsum(lengths)[last], np.array(tokenizer.eod, dtype=tokens.dtype))
            lengths[last] += 1
        if task.max_sentence_tokens:
            lengths, counts = _cap_items(lengths, counts, task.max_sentence_tokens)
        token_parts.append(tokens)
        length_parts.append(lengths)
        count_parts.append(counts)
    tokens = np.concatenate(token_parts) if token_parts else np.zeros(0, tokenizer.dtype)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.int64)
    result.documents = int(counts.size)
    return tokens, lengths, counts


def _cap_items(lengths: np.ndarray, counts: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut every item longer than `cap` into items of `cap` tokens and a shorter last one; the tokens stay put.

    megatron-core's sample builder skips a whole multi-sentence document when any sentence exceeds 512 tokens
    (helpers.cpp, LONG_SENTENCE_LEN), and code or tables without full stops make such sentences.
    """
    pieces = -(-lengths // cap)  # ceil: items each sentence becomes
    if not np.any(pieces > 1):
        return lengths, counts
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    within = np.arange(first_piece.size) - first_piece
    capped = np.minimum(cap, np.repeat(lengths, pieces) - within * cap)
    document = np.repeat(np.arange(counts.size), counts)
    return capped, np.bincount(document, weights=pieces, minlength=counts.size).astype(np.int64)


def _parse(data: bytes, task: ChunkTask, result: ChunkResult) -> tuple[list[str], list[int]]:
    """Texts of the chunk's well-formed lines, and the line number (within the chunk, from 1) of each."""
    texts: list[str] = []
    lines: list[int] = []
    rows = data.split(b"\n")
    if rows and rows[-1] == b"":
        rows.pop()  # the newline that ends the last line does not start another
    result.lines = len(rows)
    key = task.json_key
    loads = json.loads
    for number, row in enumerate(rows, 1):
        try:
            record = loads(row)
            text = record[key]
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
            if not row.strip():
                result.blank += 1
            else:
                _malformed(result, task, number, f"invalid JSON: {error}")
            continue
        except (KeyError, TypeError, IndexError):
            _malformed(result, task, number, f"not a JSON object with a {key!r} field")
            continue
        if not isinstance(text, str):
            _malformed(result, task, number, f"field {key!r} is {type(text).__name__}, not a string")
            continue
        texts.append(text)
        lines.append(number)
    return texts, lines


def _malformed(result: ChunkResult, task: ChunkTask, line: int, reason: str) -> None:
    if task.on_malformed == "fail":
        raise MalformedLine(task.index, line, reason)
    result.malformed += 1
    if len(result.reasons) < _KEPT_REASONS:
        result.reasons.append((line, reason))


def _write(
    task: ChunkTask,
    tokens: np.ndarray,
    lengths: np.ndarray,
    counts: np.ndarray | None,
    result: ChunkResult,
    began: float,
) -> None:
    bin_path, lengths_path, marker = chunk_paths(task.parts_dir, task.index)
    suffix = f".tmp-{os.getpid()}"
    tokens.tofile(bin_path + suffix)
    os.replace(bin_path + suffix, bin_path)
    lengths.tofile(lengths_path + suffix)
    os.replace(lengths_path + suffix, lengths_path)
    if counts is not None:
        counts_path = sentence_counts_path(task.parts_dir, task.index)
        counts.astype(np.int64).tofile(counts_path + suffix)
        os.replace(counts_path + suffix, counts_path)
    result.seconds = round(time.perf_counter() - began, 3)
    with open(marker + suffix, "w") as handle:
        json.dump(asdict(result), handle)
    os.replace(marker + suffix, marker)  # last: the chunk counts as done only once everything is in place
