"""Download step: fetch the selected Pile shards (and the GPT-2 vocab and merges) into raw_dir.

    python3 -u -m nemo_launcher.jobs.data.download --config <job dir>/<run.name>_hydra.yaml

A Slurm array task fetches shard SLURM_ARRAY_TASK_ID; without it every shard in file_numbers is fetched in
turn. A shard whose extracted or preprocessed output already exists is not fetched again.
"""
import logging
import os

from .config import StepConfig, run_step, this_task_items
from .fetch import fetch
from .pile_layout import PileLayout, ensure_tokenizer_files, fetch_policy
from .step_report import StepReport

log = logging.getLogger("data.download")


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("download", argv)
    layout = PileLayout(cfg)
    policy = fetch_policy(cfg)
    ensure_tokenizer_files(cfg)
    report = StepReport("download", size_label="fetched")
    for number in this_task_items(cfg.file_numbers()):
        shard = layout.shard(number)
        if shard.is_preprocessed():
            log.info("shard %d: %s is complete; nothing to download", number, shard.output_prefix)
            report.kept(number)
            continue
        if os.path.isfile(shard.extracted):
            log.info("shard %d: %s is extracted; nothing to download", number, shard.extracted)
            report.kept(number)
            continue
        log.info("shard %d: %s -> %s", number, shard.url, shard.downloaded)
        fetch(shard.url, shard.downloaded, sha256=layout.checksum(shard), policy=policy)
        report.done(number, output=shard.downloaded, size_bytes=os.path.getsize(shard.downloaded))
    return report


if __name__ == "__main__":
    run_step(main)
