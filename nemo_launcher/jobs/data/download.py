"""Download step: fetch the selected Pile shards (and the tokenizer files), or a node's share of mC4, into place.

    python3 -u -m nemo_launcher.jobs.data.download --config <job dir>/<run.name>_hydra.yaml

- `dataset: pile`: a Slurm array task fetches shard SLURM_ARRAY_TASK_ID into raw_dir; without it every shard in
  file_numbers is fetched in turn. A shard whose extracted or preprocessed output already exists is not fetched.
- `dataset: mc4`: task i fetches the files download_worker_mapping gives node i (written by the prepare step)
  to <git_lfs_dir>/<path>, checking each against the size and sha256 of its git-lfs pointer. A file already
  there, or whose split's dataset is complete, is not fetched again.

Transfers resume after an interruption (HTTP Range) and land under their final names only when verified.
"""

import logging
import os

from ..steps.config import StepConfig, run_step, this_task_items
from ..steps.fetch import fetch
from ..steps.step_report import StepReport
from .indexed_format import complete_dataset
from .pile_layout import PileLayout, ensure_tokenizer_files, fetch_policy

log = logging.getLogger("data.download")


def download_pile(cfg: StepConfig, report: StepReport) -> None:
    layout = PileLayout(cfg)
    policy = fetch_policy(cfg)
    ensure_tokenizer_files(cfg)
    for shard in layout.shards_to_do(report, log, "download"):
        number = shard.number
        if os.path.isfile(shard.extracted):
            log.info("shard %d: %s is extracted; nothing to download", number, shard.extracted)
            report.kept(number)
            continue
        log.info("shard %d: %s -> %s", number, shard.url, shard.downloaded)
        fetch(shard.url, shard.downloaded, sha256=layout.checksum(shard), policy=policy)
        report.done(number, output=shard.downloaded, size_bytes=os.path.getsize(shard.downloaded))


def download_mc4(cfg: StepConfig, report: StepReport) -> None:
    from .mc4_layout import Mc4Layout

    layout = Mc4Layout(cfg)
    policy = fetch_policy(cfg)
    finished = {
        path
        for split in layout.splits()
        if complete_dataset(layout.split_prefix(split)) is not None
        for path in split.files
    }
    for node in this_task_items(list(range(layout.nodes))):
        for item in layout.node_files(node):
            dest = layout.local_path(item)
            # A file under its final name was verified when it was renamed there: no second sha256 pass.
            if item.path in finished or os.path.isfile(dest):
                report.kept(item.path, output=dest)
                continue
            log.info("node %d: %s -> %s", node, layout.url(item.path), dest)
            fetch(layout.url(item.path), dest, size=item.size, sha256=item.sha256, policy=policy)
            report.done(item.path, output=dest, size_bytes=item.size)


DATASETS = {"pile": download_pile, "mc4": download_mc4}


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("download", argv)
    dataset = cfg.choice("dataset", tuple(DATASETS))
    report = StepReport("download", unit="shard" if dataset == "pile" else "file", size_label="fetched")
    DATASETS[dataset](cfg, report)
    return report


if __name__ == "__main__":
    run_step(main)
