"""How job programs tell people what happened: the closing summary, durations, ETAs and sizes.

    summary = Summary("training finished at step=40 of 40")
    summary.add("time", duration(31.4)).add("checkpoints", "/results/checkpoints")
    summary.show()          # rank 0 of a collective job; every process of a job that works alone
    ->  training finished at step=40 of 40
          time         0:00:31
          checkpoints  /results/checkpoints

Every program ends with one, so the last lines of any job log look alike. Standard library only.
"""

import contextlib
import os
import sys
from typing import Any

from .errors import JobError

_INDENT = "  "


def duration(seconds: float) -> str:
    """H:MM:SS, hours unbounded (`26:03:04` rather than days, so durations sort and add up by eye)."""
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def eta(seconds: float | None) -> str:
    """A remaining time in its two largest units, without spaces so it fits key=value lines:
    `5d20h`, `3h05m`, `4m07s`, `12s`; `?` when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    total = max(0, int(round(seconds)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def remaining_seconds(seconds_per_step: float, steps_done: int, steps_total: int) -> float:
    """The time the steps left take at the recent step time."""
    return max(0, steps_total - steps_done) * max(0.0, seconds_per_step)


def count(value: float) -> str:
    """A count people read at a glance: 950, 10.2k, 3.41M, 1.2B."""
    return _scaled(value, 1000, ("", "k", "M", "B", "T"), "")


def size(num_bytes: float) -> str:
    """Decimal units, as the tqdm bars of the data steps print them: 812 B, 4.1 MB, 1.23 GB."""
    return _scaled(num_bytes, 1000, ("B", "kB", "MB", "GB", "TB"), " ")


def _scaled(value: float, base: int, units, separator: str) -> str:
    scaled, unit = float(value), 0
    while abs(scaled) >= base - 0.5 and unit < len(units) - 1:  # 999.7 reads as 1k, not as 1e+03
        scaled /= base
        unit += 1
    text = f"{scaled:.0f}" if unit == 0 and scaled.is_integer() else f"{scaled:.3g}"
    return f"{text}{separator}{units[unit]}"


def size_of(path) -> int:
    """Bytes in a file, or in every file under a folder (0 when it does not exist)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(
            os.path.getsize(os.path.join(folder, name)) for name in files if os.path.isfile(os.path.join(folder, name))
        )
    return total


class Summary:
    """A title line and aligned `key  value` lines under it."""

    def __init__(self, title: str):
        self.title = title
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, value: Any) -> "Summary":
        """Adds a line; a None value is left out, so optional facts need no `if` at the call site."""
        if value is not None:
            self.items.append((key, str(value)))
        return self

    def text(self) -> str:
        width = max((len(key) for key, _ in self.items), default=0)
        lines = [self.title] + [f"{_INDENT}{key.ljust(width)}  {value}" for key, value in self.items]
        return "\n".join(lines)

    def show(self, rank: int | None = 0, stream=None) -> None:
        """Prints the summary when `rank` is 0 or None (a process that works alone)."""
        if not rank:
            print(self.text(), file=stream or sys.stdout, flush=True)


class JobFault(JobError):
    """A job stopped for a reason its user fixes outside the config (the run directory is in use, the disk is
    full): one `Error:` line and an exit status of its own, documented in nemo_launcher.contract."""

    exit_code = 1

    def __init__(self, message: str, echo: bool = True):
        super().__init__(message)
        # False on the ranks of a collective job that stop only because rank 0 found the fault and says so.
        self.echo = echo


def print_error(error: BaseException, stream=None) -> int:
    """The one line a job program prints for an error the user fixes from its text; returns the exit status:
    the JobFault's own, else 2 (a configuration error).

    A failing stream (the log is on the file system that is full) must not turn an orderly stop into a
    traceback: the exit status still tells what happened."""
    if getattr(error, "echo", True):
        with contextlib.suppress(OSError):  # the log itself may be what cannot be written
            print(f"Error: {error}", file=stream or sys.stderr, flush=True)
    return getattr(error, "exit_code", 2)
