"""Keeping a job's helper processes alive through Slurm's stop signals; their parent stops them.

    with stop_signals_held():                      # around a checkpoint save
        dist_checkpointing.save(...)
    DataLoader(..., worker_init_fn=ignore_stop_signals)

`scancel`, a node shutdown and the time-limit warning (--signal=USR1@N) signal every process of a job step,
not only the ranks: also the processes the ranks started. A rank survives SIGTERM/SIGUSR1 (it notes the
signal, finishes its step, saves and stops), but a helper that dies on it takes the save down with it:
- dist_checkpointing collects its writers' results through a multiprocessing Manager, a process spawned on
  the first save and reused by every later one. Killed by scancel, the next save fails talking to it
  (BrokenPipeError, ConnectionResetError) and the stop-signal checkpoint is lost.
- A DataLoader worker killed by it makes the next batch fail ("DataLoader worker exited unexpectedly").

A process inherits its parent's blocked signals across fork and exec, so helpers started inside
stop_signals_held() never see them. One catch: Python's resource tracker, started by the first spawn of a
process, *unblocks* SIGTERM in its parent while it starts (multiprocessing/resource_tracker.py), so the
Manager spawned right after it was left exposed; the tracker is therefore started before signals are blocked.
DataLoader workers start at other times; they ignore the signals themselves.

Standard library only.
"""
import contextlib
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def stop_signals_held():
    """SIGTERM/SIGUSR1 wait (in this thread) until the block ends, and every process started inside it ignores
    them for good: fork and exec keep a blocked mask."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # it ignores the signals itself and exits when this process does
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_stop_signals(worker_id: int = 0) -> None:
    """A DataLoader worker_init_fn: the worker outlives the signal; its parent ends it (or it notices that its
    parent has gone, which torch's workers check every few seconds)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
