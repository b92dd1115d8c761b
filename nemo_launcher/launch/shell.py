"""The one place where values become shell words. Every value that lands in a script goes through here."""

import shlex
from collections.abc import Iterable


def quote(value) -> str:
    """A single shell word that the shell turns back into exactly `str(value)`, expanding nothing."""
    return shlex.quote(str(value))


def join(words: Iterable) -> str:
    return " ".join(quote(word) for word in words)
