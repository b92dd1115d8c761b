"""The one place where values become shell words. Every value that lands in a script goes through here."""

import shlex
from collections.abc import Iterable

from ..contract.job_start_values import AtJobStart


def quote(value) -> str:
    """A single shell word that the shell turns back into exactly `str(value)`, expanding nothing; except a value
    the job's environment supplies when it starts (AtJobStart), which the job's shell expands, as one word."""
    if isinstance(value, AtJobStart):
        return f'"${{{value.variable}}}"'
    return shlex.quote(str(value))


def join(words: Iterable) -> str:
    return " ".join(quote(word) for word in words)
