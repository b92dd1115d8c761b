"""download_images: fetch the images the parquet rows point to and pack them with their captions into WebDataset tars.

    python3 -u -m nemo_launcher.jobs.multimodal.download_images --config <job dir>/<run.name>_hydra.yaml

Array task i of N takes parquet sub-files i, i+N, ... of download_images.input_dir. Each file's rows are cut into
shards of number_sample_per_shard rows; a shard is one <file>_<shard>.tar (members <key>.jpg, <key>.txt, <key>.json)
and, once the tar is complete, its success record <file>_<shard>_stats.json (rows, successes, failures by reason).
A shard with its record is finished and a rerun skips it; any other shard is done again from the start.

Shards are spread over download_num_processes processes, each downloading download_num_threads images at once.
An image that cannot be fetched (after `retries` further attempts on timeouts, resets, HTTP 429 and 5xx) or decoded
is counted as failed in the record and left out; failures never stop the step.
"""

import concurrent.futures
import glob
import io
import json
import logging
import multiprocessing
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import asdict

from nemo_launcher.contract.schemas.multimodal_data import ImageDownloadArguments

from ..common.errors import DataPrepError
from ..steps.config import run_step
from ..steps.step_report import StepReport
from .config import load_config, strided_share
from .progress import Progress
from .tars import AtomicTar

log = logging.getLogger("multimodal.download_images")
_RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
_PIL_FORMAT = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}


class _Failed(Exception):
    """An image left out: `reason` is the record's status key, the message says why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


# ---- one image --------------------------------------------------------------------------------------------------
def fetch_bytes(url: str, args: ImageDownloadArguments) -> bytes:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as error:
            raise _Failed("failed_to_download", f"{error.strerror}") from None
    if scheme not in ("http", "https"):
        raise _Failed("failed_to_download", f"unsupported URL scheme {scheme!r}")
    last = None
    for attempt in range(args.retries + 1):
        if attempt:
            time.sleep(min(5.0, 0.5 * 2 ** (attempt - 1)))
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "nemo-launcher-images/1"})
            with urllib.request.urlopen(request, timeout=args.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}"
            if error.code not in _RETRYABLE_STATUS:
                break
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            last = "timed out" if "timed out" in str(reason) else f"{type(reason).__name__}: {reason}"
    raise _Failed("failed_to_download", last or "no answer")


def prepare_image(raw: bytes, args: ImageDownloadArguments) -> tuple[bytes, dict[str, int]]:
    """The bytes to store and the sizes to record; raises _Failed for undecodable or too small images."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except Exception as error:  # noqa: BLE001  (PIL raises many types for bad input)
        raise _Failed("failed_to_resize", f"not an image ({type(error).__name__})") from None
    original = image.size
    if min(original) < args.min_image_size:
        raise _Failed("failed_to_resize", f"{original[0]}x{original[1]} is below min_image_size={args.min_image_size}")
    target_format = _PIL_FORMAT[args.encode_format]
    if args.resize_mode == "no" and image.format == target_format:
        return raw, {
            "width": original[0],
            "height": original[1],
            "original_width": original[0],
            "original_height": original[1],
        }
    image = _resize(image.convert("RGB"), args)
    out = io.BytesIO()
    options = {"compress_level": args.encode_quality} if target_format == "PNG" else {"quality": args.encode_quality}
    image.save(out, format=target_format, **options)
    return out.getvalue(), {
        "width": image.size[0],
        "height": image.size[1],
        "original_width": original[0],
        "original_height": original[1],
    }


def _resize(image, args: ImageDownloadArguments):
    from PIL import Image

    size, (width, height) = args.image_size, image.size
    if args.resize_mode == "no" or (args.resize_only_if_bigger and max(width, height) <= size):
        return image
    if args.resize_mode == "keep_ratio":
        scale = size / min(width, height)
        return image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.BICUBIC)
    if args.resize_mode == "center_crop":
        scale = size / min(width, height)
        image = image.resize((max(size, round(width * scale)), max(size, round(height * scale))), Image.BICUBIC)
        left, top = (image.size[0] - size) // 2, (image.size[1] - size) // 2
        return image.crop((left, top, left + size, top + size))
    scale = size / max(width, height)  # border: the whole image inside a square, padded in black
    image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.BICUBIC)
    square = Image.new("RGB", (size, size))
    square.paste(image, ((size - image.size[0]) // 2, (size - image.size[1]) // 2))
    return square


# ---- one shard --------------------------------------------------------------------------------------------------
def shard_names(output_dir: str, parquet: str, rows: int, per_shard: int) -> list[tuple[str, int, int]]:
    """(tar path without .tar, first row, end row) of each shard of a parquet file."""
    stem = os.path.basename(parquet)[: -len(".parquet")].replace(".", "_")
    return [
        (os.path.join(output_dir, f"{stem}_{number:05d}"), first, min(rows, first + per_shard))
        for number, first in enumerate(range(0, rows, per_shard))
    ]


def stats_path(prefix: str) -> str:
    return f"{prefix}_stats.json"


def download_shard(
    prefix: str, rows: list[dict], args: ImageDownloadArguments, threads: int, progress: Progress | None = None
) -> dict:
    """Writes <prefix>.tar and then its record; returns the record."""
    started = time.monotonic()
    name = os.path.basename(prefix)
    statuses: Counter = Counter()
    errors: Counter = Counter()

    def one(row):
        try:
            data, sizes = prepare_image(fetch_bytes(row["url"], args), args)
            return row, data, sizes, None
        except _Failed as failure:
            return row, None, None, failure

    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool, AtomicTar(f"{prefix}.tar") as tar:
        for row, data, sizes, failure in pool.map(one, rows):
            if failure is not None:
                statuses[failure.reason] += 1
                errors[str(failure)] += 1
                if progress:
                    progress.advance(1, failed=1)
                continue
            statuses["success"] += 1
            key = f"{name}_{row['row']:07d}"
            meta = {"key": key, "url": row["url"], "caption": row["caption"], **sizes, **row["extra"]}
            tar.write(
                {
                    "__key__": key,
                    args.encode_format: data,
                    "txt": row["caption"].encode("utf-8"),
                    "json": json.dumps(meta, sort_keys=True).encode("utf-8"),
                }
            )
            if progress:
                progress.advance(1, ok=1)
    record = {
        "count": len(rows),
        "successes": statuses["success"],
        "failed_to_download": statuses["failed_to_download"],
        "failed_to_resize": statuses["failed_to_resize"],
        "status_dict": dict(errors.most_common()),
        "duration": round(time.monotonic() - started, 3),
        "first_row": rows[0]["row"] if rows else 0,
    }
    _write_json(stats_path(prefix), record)
    return record


def _write_json(path: str, values: dict) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        json.dump(values, handle, indent=1, sort_keys=True)
    os.replace(temporary, path)


def read_rows(parquet: str, args: ImageDownloadArguments) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    columns = [args.url_col, args.caption_col, *args.save_additional_columns]
    missing = [name for name in columns if name not in table.column_names]
    if missing:
        key = (
            "url_col"
            if args.url_col in missing
            else "caption_col"
            if args.caption_col in missing
            else "save_additional_columns"
        )
        raise DataPrepError(
            f"data_preparation.download_images.img2dataset_additional_arguments.{key}: {parquet} has no "
            f"column {missing[0]!r} (it has {', '.join(table.column_names)})"
        )
    data = table.select(columns).to_pydict()
    return [
        {
            "row": index,
            "url": str(data[args.url_col][index]),
            "caption": str(data[args.caption_col][index] or ""),
            "extra": {name: data[name][index] for name in args.save_additional_columns},
        }
        for index in range(table.num_rows)
    ]


def _shard_job(job: tuple[str, list[dict], dict, int]) -> tuple[str, dict]:
    prefix, rows, args, threads = job
    return prefix, download_shard(prefix, rows, ImageDownloadArguments(**args), threads)


def main(argv=None) -> StepReport:
    cfg = load_config("download_images", argv)
    step = cfg.download_images
    args = step.img2dataset_additional_arguments
    report = StepReport("download_images", unit="shard", size_label="stored")
    files, who = strided_share(cfg.parquet_files())
    if not cfg.parquet_files():
        raise DataPrepError(
            f"data_preparation.download_images.input_dir={step.input_dir!r}: no file matches "
            f"{step.parquet_pattern!r}; run download_parquet first"
        )
    os.makedirs(step.output_dir, exist_ok=True)
    pending, totals = [], Counter()
    for parquet in files:
        rows = read_rows(parquet, args)
        for prefix, first, end in shard_names(step.output_dir, parquet, len(rows), args.number_sample_per_shard):
            if os.path.isfile(stats_path(prefix)) and os.path.isfile(f"{prefix}.tar"):
                with open(stats_path(prefix)) as handle:
                    totals.update(_counts(json.load(handle)))
                report.kept(os.path.basename(prefix), output=f"{prefix}.tar")
            else:
                for stale in glob.glob(f"{glob.escape(prefix)}.tar.tmp-*"):  # left by a killed run
                    os.remove(stale)
                pending.append((prefix, rows[first:end]))
    log.info(
        "%s: %d parquet files, %d shards to download, %d finished before",
        who,
        len(files),
        len(pending),
        len(report.complete_before),
    )
    processes = step.download_num_processes if step.download_num_processes > 0 else len(os.sched_getaffinity(0))
    progress = Progress("download_images", sum(len(rows) for _, rows in pending), "images", cfg.progress)
    if processes == 1 or len(pending) <= 1:
        for prefix, rows in pending:
            _finished(report, totals, prefix, download_shard(prefix, rows, args, step.download_num_threads, progress))
    else:
        jobs = [(prefix, rows, asdict(args), step.download_num_threads) for prefix, rows in pending]
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(processes, len(jobs)), mp_context=context) as pool:
            for prefix, record in pool.map(_shard_job, jobs):
                progress.advance(record["count"], ok=record["successes"], failed=record["count"] - record["successes"])
                _finished(report, totals, prefix, record)
    report.note(
        "images",
        f"{totals['successes']} stored of {totals['count']} rows "
        f"({totals['failed_to_download']} failed to download, {totals['failed_to_resize']} not usable)",
    )
    return report


def _counts(record: dict) -> Counter:
    return Counter({name: record[name] for name in ("count", "successes", "failed_to_download", "failed_to_resize")})


def _finished(report: StepReport, totals: Counter, prefix: str, record: dict) -> None:
    totals.update(_counts(record))
    report.done(os.path.basename(prefix), output=f"{prefix}.tar", size_bytes=os.path.getsize(f"{prefix}.tar"))
    if record["successes"] < record["count"]:
        reasons = "; ".join(f"{text} x{number}" for text, number in list(record["status_dict"].items())[:3])
        log.warning(
            "%s: %d of %d images left out (%s)",
            os.path.basename(prefix),
            record["count"] - record["successes"],
            record["count"],
            reasons,
        )


if __name__ == "__main__":
    run_step(main)
