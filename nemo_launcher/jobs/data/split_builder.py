"""One Megatron dataset from several compressed jsonl files (an mC4 split): each file is tokenized on its own,
then the per-file datasets are joined.

    summary = build_split(["a.json.gz", "b.json.gz"], "out/de/de_000_text_sentence", job, spec, workers=8)

Files are handled one at a time: decompressed into a hidden `.<name>.files/` folder beside the output, tokenized
there by build_shard (chunked, resumable, all workers on one file), and the decompressed copy is deleted as soon
as the file's own dataset is complete, so the scratch space needed is one file's, not the split's. A killed run
keeps the files already done and the finished chunks of the one in progress. Joining copies the per-file .bin
files (copy_file_range) and merges their indexes; .bin is renamed before .idx, as everywhere.
"""

import dataclasses
import logging
import os
import shutil
import time

from ..common.tokenizer import TokenizerSpec
from .custom_layout import plain_jsonl
from .indexed_format import complete_dataset, merge_datasets, read_index_header
from .shard_builder import ShardJob, ShardSummary, build_shard

log = logging.getLogger(__name__)


def build_split(
    inputs: list[str], output_prefix: str, job: ShardJob, spec: TokenizerSpec, workers: int = 1, progress: bool = True
) -> ShardSummary:
    """`job` gives the tokenizing settings; its input_path and output_prefix are replaced per file."""
    head, name = os.path.split(output_prefix)
    work = os.path.join(head, f".{name}.files")
    done = complete_dataset(output_prefix)
    if done is not None:
        # A run killed after the join finished but before its scratch folder was removed left it behind.
        shutil.rmtree(work, ignore_errors=True)
        return ShardSummary(
            output_prefix, done[0], done[1], 0, 0.0, skipped=True, items=read_index_header(output_prefix + ".idx")[1]
        )
    began = time.perf_counter()
    parts, malformed = [], 0
    for index, path in enumerate(inputs):
        part = os.path.join(work, f"{index:05d}")
        if complete_dataset(part) is None:
            source = plain_jsonl(path, os.path.join(work, f"{index:05d}.input"))
            # One file of a split may hold nothing (mC4 has such); the split as a whole is what training reads.
            one_file = dataclasses.replace(job, input_path=source, output_prefix=part, allow_empty=True)
            built = build_shard(one_file, spec, workers, progress)
            malformed += built.malformed
            if source != path:
                shutil.rmtree(os.path.dirname(source), ignore_errors=True)
        parts.append(part)
    documents, tokens = merge_datasets(parts, output_prefix)
    shutil.rmtree(work, ignore_errors=True)
    summary = ShardSummary(
        output_prefix,
        documents,
        tokens,
        sum(os.path.getsize(path) for path in inputs),
        time.perf_counter() - began,
        malformed=malformed,
        items=read_index_header(output_prefix + ".idx")[1],
    )
    log.info(summary.line())
    return summary
