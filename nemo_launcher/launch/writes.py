"""Every file and directory the launcher itself writes goes through here (job directories, resolved configs,
scripts, launcher_cmd.log, launcher.log, the ledger, the dry-run mirror).

A failure is one line, `cannot write <path>: <reason>` (WriteError, exit 6), never a traceback, and it leaves no
temporary file behind: a full disk or a read-only `base_results_dir` must not litter the results with
`.tmp` files that later runs trip over.
"""

import contextlib
import os
from contextlib import contextmanager
from pathlib import Path

from .errors import write_error


@contextmanager
def writing(path: Path):
    """Turns an OSError raised inside into a WriteError naming `path`."""
    try:
        yield
    except OSError as error:
        raise write_error(path, error) from None


def make_directories(path: Path) -> None:
    """`mkdir -p`; the error names the first directory that could not be made."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(error.filename if error.filename is not None else path, error) from None


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Writes a temporary file beside `path` and renames it over `path`, so a reader sees the old file or the
    new one. Whatever stops the write (an error, Ctrl-C), the temporary file is removed."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with writing(path):
            with open(temporary, "wb") as handle:
                handle.write(data)  # on a full disk the error may come only when the file is closed
            os.chmod(temporary, mode)
            os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):  # renamed into place, or never created: nothing to remove
            os.unlink(temporary)


def append_text(path: Path, text: str) -> None:
    with writing(path):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
