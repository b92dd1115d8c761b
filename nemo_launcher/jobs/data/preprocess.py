"""Preprocess step: tokenize jsonl into Megatron datasets (`<prefix>.bin` + `<prefix>.idx`).

    python3 -u -m nemo_launcher.jobs.data.preprocess --config <job dir>/<run.name>_hydra.yaml

- `dataset: pile`: one dataset per file number, from `<extracted_dir>/<nn>.jsonl` to
  `<preprocessed_dir>/<output_prefix>_<json_key>_document`; a Slurm array task handles its own file number.
  With rm_extracted the jsonl is deleted once its dataset is complete.
- `dataset: custom_dataset`: the raw_dataset_files are spread over run.node_array_size nodes by size; a Slurm
  array task handles node SLURM_ARRAY_TASK_ID's files (without it, all files), each to
  `<preprocessed_dir>/<file stem>_<json_key>_document`.
- `dataset: mc4`: each of the run.workers_per_node tasks of node SLURM_ARRAY_TASK_ID builds the splits
  preprocess_worker_mapping gives its worker slot, each from the links in <softlinks_dir>/<lang>/<split>/ to
  `<preprocessed_dir>/<lang>/<split>_<json_key>_sentence` (one folder per language: the automatic blend weighs
  languages by size ** blending_alpha). With rm_downloaded a split's .json.gz files go once its dataset is complete.

Pile and custom datasets: each process runs run.workers_per_node tokenizer workers (divided among the step's
processes on the node). mC4: each task runs one tokenizer worker per CPU it has (cpus_per_node / workers_per_node).
With split_sentences, datasets hold one item per sentence and are named `..._sentence`.
"""

import logging
import os
import shutil

from ..common.errors import DataPrepError
from ..steps.config import StepConfig, run_step, task_cpus, this_task_items, this_task_workers, worker_count
from ..steps.step_report import StepReport
from .custom_layout import RAW_FILES_KEY, balance_by_size, dataset_stem, plain_jsonl, raw_files, write_mapping
from .indexed_format import complete_dataset
from .pile_layout import PileLayout, dataset_level, ensure_tokenizer_files, shard_job, tokenizer_spec
from .shard_builder import ShardSummary, build_shard

log = logging.getLogger("data.preprocess")


def _record(report: StepReport, item, built: ShardSummary) -> None:
    if built.skipped:
        report.kept(item, output=built.output_prefix, documents=built.documents, tokens=built.tokens, items=built.items)
    else:
        report.done(
            item,
            output=built.output_prefix,
            size_bytes=built.bytes,
            documents=built.documents,
            tokens=built.tokens,
            items=built.items,
        )
        if built.malformed:
            report.note("malformed lines", f"{built.malformed} skipped in {built.output_prefix}")


def preprocess_pile(cfg: StepConfig, report: StepReport) -> None:
    layout = PileLayout(cfg)
    ensure_tokenizer_files(cfg)
    spec = tokenizer_spec(cfg)
    workers = worker_count(cfg)
    progress = cfg.bound.progress
    remove_input = cfg.bound.rm_extracted
    for number in this_task_items(cfg.bound.shard_numbers()):
        shard = layout.shard(number)
        if not shard.is_preprocessed() and not os.path.isfile(shard.extracted):
            raise DataPrepError(
                f"shard {number}: {shard.extracted} not found; run the download and extract steps "
                f"(data_preparation.download_the_pile=True)"
            )
        _record(
            report,
            number,
            build_shard(
                shard_job(
                    cfg,
                    shard.extracted,
                    shard.output_prefix,
                    source=f"data_preparation.file_numbers={number} ({shard.extracted})",
                ),
                spec,
                workers,
                progress,
            ),
        )
        if remove_input and os.path.isfile(shard.extracted):
            os.remove(shard.extracted)


def preprocess_custom(cfg: StepConfig, report: StepReport) -> None:
    files = raw_files(cfg)
    custom = cfg.bound
    nodes = custom.run.node_array_size
    assignment = balance_by_size(files, nodes)
    if custom.preprocess_worker_mapping:
        write_mapping(custom.preprocess_worker_mapping, assignment)
    preprocessed_dir = custom.preprocessed_dir
    scratch = os.path.join(preprocessed_dir, ".decompressed")
    spec = tokenizer_spec(cfg)
    workers = worker_count(cfg)
    progress = custom.progress
    key = custom.json_key
    level = dataset_level(cfg)
    for node in this_task_items(list(range(nodes))):
        if not assignment[node]:
            log.info("node %d: no files (more nodes than files)", node)
        for path in assignment[node]:
            prefix = os.path.join(preprocessed_dir, f"{dataset_stem(path)}_{key}_{level}")
            source = path
            if complete_dataset(prefix) is None:
                source = plain_jsonl(path, scratch)
            job = shard_job(cfg, source, prefix, source=f"{RAW_FILES_KEY}={path}")
            _record(report, path, build_shard(job, spec, workers, progress))
            if source != path:
                os.remove(source)
    if os.path.isdir(scratch) and not os.listdir(scratch):
        shutil.rmtree(scratch, ignore_errors=True)


def preprocess_mc4(cfg: StepConfig, report: StepReport) -> None:
    from .mc4_layout import Mc4Layout
    from .split_builder import build_split

    layout = Mc4Layout(cfg)
    spec = tokenizer_spec(cfg)
    workers = task_cpus(cfg)
    progress = cfg.bound.progress
    remove_input = cfg.bound.rm_downloaded
    for worker in this_task_workers(layout.nodes, layout.workers_per_node):
        for split in layout.worker_splits(worker):
            prefix = layout.split_prefix(split)
            inputs = []
            if complete_dataset(prefix) is None:
                folder = layout.split_links(split)
                if not os.path.isdir(folder):
                    raise DataPrepError(
                        f"split {split.name}: {folder} not found; run the setup_preprocess step "
                        f"(data_preparation.preprocess_data=True)"
                    )
                inputs = [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
            log.info("worker %d: split %s (%d files)", worker, split.name, len(split.files))
            _record(
                report, split.name, build_split(inputs, prefix, shard_job(cfg, "", prefix), spec, workers, progress)
            )
            if remove_input:
                for path in split.files:
                    if os.path.isfile(layout.local_path(path)):
                        os.remove(layout.local_path(path))


DATASETS = {"pile": preprocess_pile, "mc4": preprocess_mc4, "custom_dataset": preprocess_custom}


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("preprocess", argv)
    dataset = cfg.choice("dataset", tuple(DATASETS))
    report = StepReport("preprocess", unit={"pile": "shard", "mc4": "split"}.get(dataset, "file"))
    DATASETS[dataset](cfg, report)
    return report


if __name__ == "__main__":
    run_step(main)
