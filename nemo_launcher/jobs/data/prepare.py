"""Prepare step (mC4): list the repository's files, select the configured languages, share them out for download.

    python3 -u -m nemo_launcher.jobs.data.prepare --config <job dir>/<run.name>_hydra.yaml

Lists the train files of mc4_repo_url (a shallow bare git clone into <git_lfs_dir>/.git for Hugging Face: file
names, sizes and sha256 from the git-lfs pointers; or a walk of a local folder), keeps those of `languages`
(`all`: every language; `en` is the cleaned C4 with use_cleaned_english), and writes download_worker_mapping:
the files and which of the run.node_array_size download tasks fetches which (balanced by size). Also fetches the
SentencePiece model and vocabulary when download_tokenizer_url / download_vocab_url name them. One job; a rerun
reuses the clone, so it needs no network.
"""

import logging
from collections import Counter

from ..steps.config import StepConfig, run_step
from ..steps.step_report import StepReport
from .mc4_layout import Mc4Layout, ensure_tokenizer_files

log = logging.getLogger("data.prepare")


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("prepare", argv)
    layout = Mc4Layout(cfg)
    ensure_tokenizer_files(cfg)
    files = layout.select(layout.list_repository())
    assignment = layout.write_download_mapping(files)
    report = StepReport("prepare", unit="language", size_label="to download")
    sizes, counts = Counter(), Counter()
    for item in files:
        sizes[item.language] += item.size
        counts[item.language] += 1
    for language in sorted(sizes):
        log.info("%s: %d files, %.3f GB", language, counts[language], sizes[language] / 1e9)
        report.done(language, size_bytes=sizes[language])
    report.note("files", f"{len(files)} over {len(assignment)} download nodes ({layout.download_mapping})")
    return report


if __name__ == "__main__":
    run_step(main)
