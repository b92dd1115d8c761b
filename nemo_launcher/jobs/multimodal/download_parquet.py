"""download_parquet: the dataset's parquet files (image URL + caption), each cut into parquet_subpartitions parts.

    python3 -u -m nemo_launcher.jobs.multimodal.download_parquet --config <job dir>/<run.name>_hydra.yaml

The repository is a Hugging Face dataset (listed from a bare git clone of its git-lfs pointers, each file fetched
from <dataset_repo_url>/resolve/main/<path> and checked against the pointer's size and sha256) or a file:// folder.
Files matching parquet_pattern become <output_dir>/<path with / as __>_part<k>.parquet, k < parquet_subpartitions,
row ranges of equal size: download_images runs one array task per part. A file whose parts all exist is skipped.
"""

import fnmatch
import logging
import os
import shutil

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.fetch import FetchPolicy, fetch
from ..steps.git_lfs_listing import list_files
from ..steps.step_report import StepReport
from .config import load_config

log = logging.getLogger("multimodal.download_parquet")
_REVISION = "main"


def repository_files(repo_url: str, pattern: str, clone: str) -> list[tuple[str, int, str | None]]:
    """(path in the repository, size, sha256 or None) of every file the pattern selects, sorted by path."""

    def wanted(path: str) -> bool:
        return fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(os.path.basename(path), pattern)

    if repo_url.startswith("file://"):
        root = repo_url[len("file://") :]
        if not os.path.isdir(root):
            raise DataPrepError(f"data_preparation.dataset_repo_url={repo_url!r}: no such folder")
        found = []
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
            for name in names:
                path = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                if wanted(path):
                    found.append((path, os.path.getsize(os.path.join(folder, name)), None))
    else:
        found = list_files(repo_url, clone, wanted, key="data_preparation.dataset_repo_url")
    return sorted(found)


def part_paths(output_dir: str, path: str, parts: int) -> list[str]:
    stem = path[: -len(".parquet")] if path.endswith(".parquet") else path
    flat = stem.replace("/", "__")
    return [os.path.join(output_dir, f"{flat}_part{k:02d}.parquet") for k in range(parts)]


def split(source: str, targets: list[str]) -> int:
    """Writes equal row ranges of `source` to `targets` (each under a temporary name first); returns the rows."""
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    rows = table.num_rows
    for number, target in enumerate(targets):
        first, last = number * rows // len(targets), (number + 1) * rows // len(targets)
        pq.write_table(table.slice(first, last - first), target + ".tmp")
        os.replace(target + ".tmp", target)
    return rows


def main(argv=None) -> StepReport:
    cfg = load_config("download_parquet", argv)
    step = cfg.download_parquet
    report = StepReport("download_parquet", unit="parquet file", size_label="fetched")
    sources = os.path.join(step.output_dir, ".source")
    files = repository_files(
        cfg.dataset_repo_url, step.parquet_pattern, os.path.join(step.output_dir, ".repository.git")
    )
    if not files:
        raise DataPrepError(
            f"data_preparation.download_parquet.parquet_pattern={step.parquet_pattern!r}: no file of "
            f"{cfg.dataset_repo_url} matches"
        )
    total_rows = 0
    for path, size, sha256 in files:
        targets = part_paths(step.output_dir, path, step.parquet_subpartitions)
        if all(os.path.isfile(target) for target in targets):
            report.kept(path, output=targets[0])
            continue
        if cfg.dataset_repo_url.startswith("file://"):
            url = "file://" + os.path.join(cfg.dataset_repo_url[len("file://") :], path)
        else:
            url = f"{cfg.dataset_repo_url}/resolve/{_REVISION}/{path}"
        local = os.path.join(sources, path)
        log.info("%s -> %s", url, local)
        fetch(url, local, size=size, sha256=sha256, policy=FetchPolicy(progress=cfg.progress))
        total_rows += split(local, targets)
        os.remove(local)
        report.done(path, output=targets[0], size_bytes=size)
    shutil.rmtree(sources, ignore_errors=True)
    if total_rows:
        report.note(
            "rows",
            f"{total_rows} (image URLs with captions) in {len(report.finished) * step.parquet_subpartitions} parts",
        )
    return report


if __name__ == "__main__":
    run_step(main)
