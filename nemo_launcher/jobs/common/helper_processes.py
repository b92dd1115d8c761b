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

Ignoring the stop signals has a cost: when the rank itself is killed (SIGKILL, the OOM killer), nothing ends that
Manager, and on a machine without Slurm's cgroups it lives on (about 280 MB each). bind_checkpoint_manager()
starts it ourselves, before the first save, with the kernel's parent-death signal (PR_SET_PDEATHSIG): it gets
SIGKILL when the rank that started it goes, however it goes.

Standard library only.
"""
import contextlib
import ctypes
import ctypes.util
import signal
import sys

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


def bind_checkpoint_manager() -> None:
    """Start the Manager dist_checkpointing's writers report through (megatron.core's filesystem_async keeps one per
    process, made on first use) so that it dies with this process. Call inside stop_signals_held(), before a save;
    later calls and other platforms do nothing. The death signal follows the thread that started the Manager:
    start it from the main thread, which lives as long as the rank."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if filesystem_async._results_queue is not None or not sys.platform.startswith("linux"):
        return
    import multiprocessing
    import os
    from multiprocessing.managers import SyncManager

    context = multiprocessing.get_context("spawn")  # what megatron.core uses: no copy of the rank's memory
    manager = SyncManager(ctx=context)
    manager.start(initializer=_die_with_parent, initargs=(os.getpid(),))
    filesystem_async._results_queue = manager.Queue()


def _die_with_parent(parent: int) -> None:
    import os

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != parent:  # the parent went before the death signal was armed
        os._exit(1)
