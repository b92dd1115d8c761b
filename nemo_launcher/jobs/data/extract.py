"""Extract step: decompress each selected `<n>.jsonl.zst` into `<extracted_dir>/<n>.jsonl`, streaming.

    python3 -u -m nemo_launcher.jobs.data.extract --config <job dir>/<run.name>_hydra.yaml

Memory stays flat whatever the shard size (zstandard's stream reader, 16 MB at a time). The output appears
under its final name only when complete; with rm_downloaded the .zst is deleted afterwards.
"""

import logging
import os

import zstandard
from tqdm import tqdm

from ..common.errors import DataPrepError
from ..steps.config import StepConfig, run_step
from ..steps.step_report import StepReport
from .pile_layout import PileLayout

log = logging.getLogger("data.extract")
_BLOCK = 16 << 20
# The Pile was compressed with long-distance matching; the decoder must accept its window (up to 2 GB).
_MAX_WINDOW = 1 << 31


def decompress(source: str, dest: str, progress: bool = True) -> None:
    """Stream-decompress a .zst file to `dest`, atomically."""
    # A fixed name, not a per-process one: one array task owns a shard, and a rerun after kill -9 must
    # overwrite the partial file rather than leave tens of GB of it beside a new one.
    temporary = dest + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    decompressor = zstandard.ZstdDecompressor(max_window_size=_MAX_WINDOW)
    try:
        with (
            open(source, "rb") as compressed,
            open(temporary, "wb") as out,
            tqdm(
                total=os.path.getsize(source),
                unit="B",
                unit_scale=True,
                desc=os.path.basename(source),
                disable=not progress,
                mininterval=2.0,
                dynamic_ncols=True,
            ) as bar,
        ):
            reader = decompressor.stream_reader(compressed, read_size=_BLOCK)
            while True:
                block = reader.read(_BLOCK)
                if not block:
                    break
                out.write(block)
                bar.update(compressed.tell() - bar.n)  # progress in compressed bytes: the total is known
        os.replace(temporary, dest)
    except zstandard.ZstdError as error:
        raise DataPrepError(
            f"{source}: not a valid zstd file ({error}); delete it so the download step fetches it again"
        ) from None
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def main(argv=None) -> StepReport:
    cfg = StepConfig.from_argv("extract", argv)
    layout = PileLayout(cfg)
    remove_source = cfg.bound.rm_downloaded
    progress = cfg.bound.progress
    report = StepReport("extract", size_label="compressed input")
    for shard in layout.shards_to_do(report, log, "extract"):
        number = shard.number
        if os.path.isfile(shard.extracted):
            log.info("shard %d: %s already extracted", number, shard.extracted)
            report.kept(number, output=shard.extracted)
        elif not os.path.isfile(shard.downloaded):
            raise DataPrepError(
                f"shard {number}: {shard.downloaded} not found; run the download step "
                f"(data_preparation.download_the_pile=True)"
            )
        else:
            log.info("shard %d: %s -> %s", number, shard.downloaded, shard.extracted)
            compressed = os.path.getsize(shard.downloaded)
            decompress(shard.downloaded, shard.extracted, progress)
            report.done(number, output=shard.extracted, size_bytes=compressed)
        if remove_source and os.path.isfile(shard.downloaded):
            os.remove(shard.downloaded)
    return report


if __name__ == "__main__":
    run_step(main)
