"""Setup-preprocess step (mC4): group each language's files into splits, link them, share the splits out.

    python3 -u -m nemo_launcher.jobs.data.setup_preprocess --config <job dir>/<run.name>_hydra.yaml

Each language's downloaded files, in name order, are cut into splits of at most max_split_size GB; split
<lang>_<nnn> gets a folder <softlinks_dir>/<lang>/<lang>_<nnn>/ of links to its files (the preprocess step reads
that folder) and becomes one dataset. preprocess_worker_mapping says which of the run.node_array_size x
run.workers_per_node preprocessing workers builds which splits (balanced by size). A split whose dataset is
already complete needs no files (rm_downloaded may have removed them). One job.
"""

import logging
import os
import shutil

from ..steps.config import StepConfig, run_step
from ..steps.step_report import StepReport
from .indexed_format import complete_dataset
from .mc4_layout import Mc4Error, Mc4Layout, ensure_tokenizer_files

log = logging.getLogger("data.setup_preprocess")


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("setup_preprocess", argv)
    layout = Mc4Layout(cfg)
    if not cfg.bound.train_tokenizer:
        ensure_tokenizer_files(cfg)
    splits = layout.splits()
    report = StepReport("setup_preprocess", unit="split")
    missing = [
        layout.local_path(path)
        for split in splits
        if complete_dataset(layout.split_prefix(split)) is None
        for path in split.files
        if not os.path.isfile(layout.local_path(path))
    ]
    if missing:
        raise Mc4Error(
            f"{len(missing)} files to preprocess are not downloaded (first: {missing[0]}); run the download "
            f"step (data_preparation.download_mc4=True)"
        )
    for split in splits:
        folder = layout.split_links(split)
        if complete_dataset(layout.split_prefix(split)) is not None:
            report.kept(split.name, output=layout.split_prefix(split))
            continue
        # Made afresh each time, so a folder never holds a link to a file another setting put in the split.
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        for path in split.files:
            os.symlink(os.path.abspath(layout.local_path(path)), os.path.join(folder, os.path.basename(path)))
        report.done(split.name, output=folder, size_bytes=split.size)
    assignment = layout.write_preprocess_mapping(splits)
    busy = sum(1 for items in assignment if items)
    report.note("workers", f"{busy} of {len(assignment)} get splits ({layout.preprocess_mapping})")
    return report


if __name__ == "__main__":
    run_step(main)
