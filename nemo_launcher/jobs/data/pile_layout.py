"""Where each Pile shard lives at each step, from the config: URL, downloaded .zst, extracted .jsonl, dataset.

    layout = PileLayout(cfg)
    shard = layout.shard(3)   # shard.url, shard.downloaded, shard.extracted, shard.output_prefix
    shard.is_preprocessed()   # the final .bin/.idx are complete: every earlier step can be skipped

Each step asks how far a shard already got, so a rerun after a failure (or after rm_downloaded/rm_extracted
removed the intermediate files) skips what is done instead of failing for a missing input.
"""

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from ...contract.lddl import shard_marker
from ..common.tokenizer import TokenizerSpec
from ..steps.config import DataConfigError, StepConfig, this_task_items
from ..steps.fetch import FetchPolicy, fetch
from ..steps.step_report import StepReport
from .indexed_format import complete_dataset
from .shard_builder import ShardJob


@dataclass(frozen=True)
class PileShard:
    number: int
    url: str
    downloaded: str  # <raw_dir>/<shard_name>, e.g. 03.jsonl.zst
    extracted: str  # <extracted_dir>/<shard_name without .zst>, e.g. 03.jsonl
    output_prefix: str  # <preprocessed_dir>/<output_prefix>_<json_key>_document (_sentence with split_sentences)

    def is_preprocessed(self) -> bool:
        return complete_dataset(self.output_prefix) is not None


class PileLayout:
    def __init__(self, cfg: StepConfig):
        self.cfg = cfg
        pile = cfg.bound
        self.url_base = pile.the_pile_url
        self.name_format = pile.shard_name
        self.prefix_format = pile.output_prefix
        self.raw_dir = pile.raw_dir
        self.extracted_dir = pile.extracted_dir
        self.preprocessed_dir = pile.preprocessed_dir
        self.json_key = pile.json_key
        self.level = dataset_level(cfg)
        self.checksums = pile.checksums

    def _format(self, key: str, template: str, number: int) -> str:
        try:
            return template.format(file_number=number)
        except (KeyError, IndexError, ValueError) as error:
            raise DataConfigError(
                f"data_preparation.{key}={template!r}: cannot format it ({error}); use {{file_number}}, "
                f'e.g. "{{file_number:02d}}.jsonl.zst"'
            ) from None

    def shard(self, number: int) -> PileShard:
        name = self._format("shard_name", self.name_format, number)
        extracted_name = name[: -len(".zst")] if name.endswith(".zst") else name + ".jsonl"
        prefix = self._format("output_prefix", self.prefix_format, number)
        base = self.url_base if self.url_base.endswith("/") else self.url_base + "/"
        return PileShard(
            number=number,
            url=base + name,
            downloaded=os.path.join(self.raw_dir, name),
            extracted=os.path.join(self.extracted_dir, extracted_name),
            output_prefix=os.path.join(self.preprocessed_dir, f"{prefix}_{self.json_key}_{self.level}"),
        )

    def shards_to_do(self, report: StepReport, log: logging.Logger, step: str) -> Iterator[PileShard]:
        """This task's shards (all of file_numbers without a Slurm array) that `step` (download, extract) may still
        have work on: a shard whose dataset is complete already is logged and reported kept instead."""
        for number in this_task_items(self.cfg.bound.shard_numbers()):
            shard = self.shard(number)
            if self.finished(shard):
                log.info("shard %d: %s is complete; nothing to %s", number, shard.output_prefix, step)
                report.kept(number)
            else:
                yield shard

    def finished(self, shard: PileShard) -> bool:
        """Every output the later steps make of the shard is complete: its dataset (when preprocess runs) and its
        LDDL bins (when data_preparation.lddl is set); with neither, its dataset."""
        pile = self.cfg.bound
        lddl = getattr(pile, "lddl", None)
        if lddl is None:
            return shard.is_preprocessed()
        binned = os.path.isfile(shard_marker(lddl.output_dir, shard.number))
        return binned and (shard.is_preprocessed() or not pile.preprocess_data)

    def checksum(self, shard: PileShard) -> str | None:
        return self.checksums.get(os.path.basename(shard.downloaded))


def dataset_level(cfg: StepConfig) -> str:
    """The last word of a dataset's name, as Megatron-LM's preprocess_data.py names it: one item per sentence
    (`..._text_sentence`) or per document (`..._text_document`)."""
    return "sentence" if cfg.bound.split_sentences else "document"


def fetch_policy(cfg: StepConfig) -> FetchPolicy:
    download = cfg.bound.download
    return FetchPolicy(
        retries=download.retries,
        timeout_s=download.timeout_s,
        backoff_s=download.backoff_s,
        progress=cfg.bound.progress,
    )


def tokenizer_spec(cfg: StepConfig) -> TokenizerSpec:
    return TokenizerSpec(**cfg.bound.tokenizer_files(), eod_token=cfg.bound.eod_token)


def ensure_tokenizer_files(cfg: StepConfig) -> None:
    """Fetch the GPT-2 vocab and merges (or a WordPiece vocab.txt) from download_vocab_url / download_merges_url
    when not yet present.

    Several array tasks may do this at once; each writes a private temporary file and renames it, so the
    files are always whole whichever rename lands last.
    """
    pile = cfg.bound
    for url, path in ((pile.download_vocab_url, pile.vocab_file), (pile.download_merges_url, pile.merge_file)):
        if path and url and not os.path.isfile(path):
            fetch(url, path, policy=fetch_policy(cfg), resume=False)


def shard_job(cfg: StepConfig, input_path: str, output_prefix: str, source: str = "") -> ShardJob:
    """`source`: the `key=value` the user typed that names this input (for messages)."""
    section = cfg.bound  # the schema refused a chunk_size_mb that is not a positive number
    return ShardJob(
        input_path=input_path,
        output_prefix=output_prefix,
        source=source,
        allow_empty=section.allow_empty_shards,
        json_key=section.json_key,
        on_malformed=section.on_malformed,
        append_eod=section.append_eod,
        chunk_bytes=max(1, int(section.chunk_size_mb * (1 << 20))),
        split_sentences=section.split_sentences,
        max_sentence_tokens=section.max_sentence_tokens,
    )
