"""The files of a git repository whose large files live in git-lfs (a Hugging Face dataset), without their contents.

    files = list_files("https://huggingface.co/datasets/allenai/c4", "/data/c4/.git", keep=lambda p: p.endswith(".gz"),
                       key="data_preparation.mc4_repo_url")
    # [(path, size in bytes, sha256 hex), ...] in the order git lists them

A bare clone of the newest commit holds the git-lfs pointers (a few lines each), so it is small whatever the data's
size, and the pointers give each file's size and sha256 for checking the download (<url>/resolve/main/<path>).
"""

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable

from ..common.errors import DataPrepError

_LFS_POINTER = re.compile(
    rb"^version https://git-lfs\.github\.com/spec/v1\n(?:.*\n)*?oid sha256:(?P<oid>[0-9a-f]{64})\n"
    rb"size (?P<size>\d+)\n?",
    re.MULTILINE,
)


class RepositoryError(DataPrepError):
    """git is missing, or the repository cannot be cloned or read; the message names the key to change."""


def list_files(url: str, clone: str, keep: Callable[[str], bool], key: str) -> list[tuple[str, int, str | None]]:
    """(path, size, sha256) of every file `keep` accepts; `clone` is where the bare clone is kept between steps."""
    if not os.path.isdir(clone):
        _clone(url, clone, key)
    listing = _git(clone, key, "ls-tree", "-r", "-z", "--full-tree", "HEAD").stdout
    blobs = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        _, kind, oid = meta.split()
        path = path.decode("utf-8")
        if kind == b"blob" and keep(path):
            blobs.append((path, oid.decode()))
    facts = _pointer_facts(clone, key, [oid for _, oid in blobs])
    return [(path, size, sha) for (path, _), (size, sha) in zip(blobs, facts)]


def _missing_git(key: str) -> RepositoryError:
    return RepositoryError(
        f"git is not installed on this node; the file list comes from the repository's git "
        f"history (install git, or point {key} at a local folder)"
    )


def _git(clone: str, key: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", f"--git-dir={clone}", *args], input=stdin, capture_output=True, check=True)
    except FileNotFoundError:
        raise _missing_git(key) from None
    except subprocess.CalledProcessError as error:
        raise RepositoryError(
            f"git {' '.join(args[:2])} in {clone} failed: {error.stderr.decode(errors='replace').strip()}"
        ) from None


def _clone(url: str, clone: str, key: str) -> None:
    """A bare clone of the newest commit, under a temporary name until complete. GIT_LFS_SKIP_SMUDGE keeps an
    installed git-lfs from fetching contents; dumb HTTP servers refuse shallow clones, so a full one follows."""
    temporary = clone + ".tmp"
    env = dict(os.environ, GIT_LFS_SKIP_SMUDGE="1", GIT_TERMINAL_PROMPT="0")
    os.makedirs(os.path.dirname(os.path.abspath(clone)), exist_ok=True)
    errors = []
    for depth in (["--depth", "1"], []):
        shutil.rmtree(temporary, ignore_errors=True)  # a clone a killed run left half-done
        try:
            subprocess.run(
                ["git", "clone", "--bare", "--quiet", *depth, url, temporary], env=env, capture_output=True, check=True
            )
        except FileNotFoundError:
            raise _missing_git(key) from None
        except subprocess.CalledProcessError as error:
            errors.append(error.stderr.decode(errors="replace").strip())
            continue
        os.replace(temporary, clone)
        return
    raise RepositoryError(f"{key}: git clone {url} failed: {errors[-1]}")


def _pointer_facts(clone: str, key: str, oids: list[str]) -> list[tuple[int, str | None]]:
    """(size, sha256) of each blob: read from its git-lfs pointer, or the blob's own size for a plain file."""
    if not oids:
        return []
    out = _git(clone, key, "cat-file", "--batch", stdin="".join(oid + "\n" for oid in oids).encode()).stdout
    facts, position = [], 0
    for _ in oids:
        newline = out.index(b"\n", position)
        _, _, size = out[position:newline].split()
        body = out[newline + 1 : newline + 1 + int(size)]
        position = newline + 1 + int(size) + 1
        pointer = _LFS_POINTER.match(body)
        if pointer:
            facts.append((int(pointer.group("size")), pointer.group("oid").decode()))
        else:
            facts.append((len(body), hashlib.sha256(body).hexdigest()))
    return facts
