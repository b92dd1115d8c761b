"""Ctrl-C, SIGTERM, a closed terminal (SIGHUP) and SIGQUIT while the launcher submits or runs jobs.

    with signals_raised():        # around the submission of a real run only
        submit_each(plan)         # any of SIGNALS raises Interrupted here (pipeline.py)
    with signals_deferred() as noted:
        backend.settle()          # a rollback (rollback.py): signals are noted, not acted on; `noted` lists them

Python turns SIGINT into KeyboardInterrupt, but SIGTERM (what `kill` and most schedulers send), SIGHUP (the
terminal or ssh session closed) and SIGQUIT (Ctrl-\\) kill the process outright: jobs already queued would stay
queued and the ledger would say `submitting` for ever. All four become `Interrupted`, which the pipeline answers
with a rollback. Once the first one has arrived, later ones are only
noted, so that pressing Ctrl-C again cannot abandon the rollback halfway. The previous handlers come back when
the block ends. Signal handlers can only be set in the main thread; elsewhere these blocks change nothing.
"""

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Interrupted(KeyboardInterrupt):
    """One of SIGNALS arrived while a real submission was under way."""

    def __init__(self, signal_number: int):
        super().__init__(signal_number)
        self.signal_number = signal_number

    @property
    def signal_name(self) -> str:
        return describe(self.signal_number)


# What a user did to send each signal, where it is not obvious from its name.
_MEANING = {signal.SIGINT: "Ctrl-C", signal.SIGHUP: "the terminal closed", signal.SIGQUIT: "Ctrl-\\"}


def describe(signal_number: int) -> str:
    name = signal.Signals(signal_number).name
    meaning = _MEANING.get(signal_number)
    return f"{name} ({meaning})" if meaning else name


def _note(noted: list[int], message: str) -> Callable:
    def handler(signal_number, frame):
        noted.append(signal_number)
        print(f"{describe(signal_number)} received: {message}", file=sys.stderr, flush=True)

    return handler


@contextmanager
def _handlers(handler: Callable) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in SIGNALS}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


@contextmanager
def signals_raised() -> Iterator[list[int]]:
    """The first of SIGNALS raises Interrupted; any later one is noted in the list yielded (what follows
    the first is a rollback or a stop, which must finish)."""
    noted: list[int] = []
    later = _note(noted, "already stopping; wait for the jobs submitted so far to be cancelled")
    fired = []

    def handler(signal_number, frame):
        if fired:
            later(signal_number, frame)
            return
        fired.append(signal_number)
        raise Interrupted(signal_number)

    with _handlers(handler):
        yield noted


@contextmanager
def signals_deferred(
    message: str = "rolling back first; wait for the jobs submitted so far to be cancelled",
) -> Iterator[list[int]]:
    """SIGNALS are noted (and the user told why nothing happens) instead of acted on."""
    noted: list[int] = []
    with _handlers(_note(noted, message)):
        yield noted
