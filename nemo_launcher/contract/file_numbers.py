"""Shard selections such as `file_numbers: "0,3,5-7"`: parse them, and write them back as a Slurm `--array` value.

    >>> parse_file_numbers("0,3,5-7")
    [0, 3, 5, 6, 7]
    >>> slurm_array([0, 3, 5, 6, 7], max_parallel=30)
    '0,3,5-7%30'

Pure Python and dependency-free on purpose: the launch side (which never imports torch or numpy) renders the
array range from it, and the data-preparation job programs check SLURM_ARRAY_TASK_ID against the same parse,
so both sides always agree on which shards a selection names.
"""

import re
from collections.abc import Iterable

# One item: a number or an inclusive range "a-b". Whitespace around items is tolerated because YAML users
# write "0, 3, 5-7"; anything else (signs, steps, letters) is rejected rather than guessed at.
_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


class FileNumbersError(ValueError):
    """A `file_numbers` value that is not a comma list of numbers and ranges; the message says what is wrong."""


def parse_file_numbers(spec, key: str = "file_numbers") -> list[int]:
    """Sorted, de-duplicated shard numbers named by `spec` ("0-29", "0", "0,3,5-7", or an int).

    Raises FileNumbersError naming `key` for empty items, reversed ranges, negative or non-numeric parts.
    """
    if isinstance(spec, bool):  # bool is an int subclass; `file_numbers: true` is surely a mistake
        raise FileNumbersError(f'{key}={spec!r}: expected numbers and ranges such as "0-29" or "0,3,5-7"')
    if isinstance(spec, int):
        if spec < 0:
            raise FileNumbersError(f"{key}={spec!r}: file numbers start at 0")
        return [spec]
    if not isinstance(spec, str) or not spec.strip():
        raise FileNumbersError(f'{key}={spec!r}: expected numbers and ranges such as "0-29" or "0,3,5-7"')
    numbers = set()
    for item in spec.split(","):
        match = _ITEM.match(item)
        if match is None:
            raise FileNumbersError(
                f'{key}={spec!r}: item {item.strip()!r} is not a number or a range a-b (write e.g. "0-29" or "0,3,5-7")'
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise FileNumbersError(f"{key}={spec!r}: range {item.strip()!r} ends before it starts")
        numbers.update(range(first, last + 1))
    return sorted(numbers)


def compress_ranges(numbers: Iterable[int]) -> str:
    """The shortest comma list of numbers and a-b ranges for `numbers`: [0, 1, 2, 5] -> "0-2,5"."""
    ordered = sorted(set(numbers))
    if not ordered:
        raise FileNumbersError("file_numbers: the selection is empty")
    parts = []
    start = previous = ordered[0]
    for number in ordered[1:] + [None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ",".join(parts)


def slurm_array(numbers: Iterable[int], max_parallel: int | None = None) -> str:
    """The `#SBATCH --array=` value for these indices, throttled to `max_parallel` running tasks when given."""
    text = compress_ranges(numbers)
    if max_parallel is not None:
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise FileNumbersError(f"run.node_array_size={max_parallel!r}: must be a positive integer")
        text += f"%{max_parallel}"
    return text


def array_task_count(array: str | None) -> int | None:
    """Tasks in a Slurm array spec ("0-29%30" -> 30); None when the job is not an array or the spec has a form
    (steps such as "0-15:4") that only Slurm itself expands."""
    if not array:
        return None
    try:
        return len(parse_file_numbers(str(array).split("%", 1)[0]))
    except FileNumbersError:
        return None
