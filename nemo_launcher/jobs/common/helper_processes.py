"""Keeping a job's helper processes alive through Slurm's stop signals; their parent stops them.

    with stop_signals_held():                      # around a checkpoint save
        dist_checkpointing.save(...)
    DataLoader(..., worker_init_fn=ignore_stop_signals)

`scancel`, a node shutdown and the time-limit warning (--signal=USR1@N) signal every process of a job step,
not only the ranks: also the processes the ranks started. A rank survives SIGTERM/SIGUSR1 (it notes the
signal, finishes its step, saves and stops), but a helper that dies on it takes the save down with it:
- dist_checkpointing forks writer processes for each save; killed by scancel, the save fails and the stop-signal
  checkpoint is lost.
- A DataLoader worker killed by it makes the next batch fail ("DataLoader worker exited unexpectedly").

A process inherits its parent's blocked signals across fork and exec, so helpers started inside
stop_signals_held() never see them. Python's multiprocessing resource tracker (a child of the rank, started by the
first semaphore, shared memory segment or spawned process) ignores SIGINT/SIGTERM but not SIGUSR1: killed by the
time-limit warning, it left "resource_tracker: process died unexpectedly, relaunching" in every requeued attempt's
log when the rank's stop-signal save started it again. start_resource_tracker() starts it with the stop signals
blocked; its main() unblocks only SIGINT/SIGTERM, so SIGUSR1 stays blocked in it for good (pending, harmless) and
it lives until the rank's end closes its pipe. Every collective job calls it at start (run_directory.claimed_run),
before anything else could start the tracker unprotected. Its start *unblocks* SIGTERM in the caller
(multiprocessing/resource_tracker.py), so the caller's mask is put back after it.
DataLoader workers start at other times; they ignore the signals themselves.

The writers report their results through a queue, which megatron.core by default keeps in a spawned multiprocessing
Manager: a server process per rank, started on the first save, that imports torch to unpickle the results (about
5 s of CPU and 280 MB), ignores the stop signals when started inside stop_signals_held(), and so outlived a rank
killed with SIGKILL off Slurm. Our saves are synchronous, so the rank itself both puts the results and reads them:
collect_write_results_here() gives megatron a queue in the rank's own memory, and no Manager is started.

Standard library only.
"""

import contextlib
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@contextlib.contextmanager
def stop_signals_held():
    """SIGTERM/SIGUSR1 wait (in this thread) until the block ends, and every process started inside it ignores
    them for good: fork and exec keep a blocked mask."""
    start_resource_tracker()  # now: started lazily inside the block, the tracker would unblock SIGTERM here
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_resource_tracker() -> None:
    """Start Python's multiprocessing resource tracker for this process, deaf to the stop signals for good (see the
    module's docstring); a no-op when it runs already. This process's signal mask is as it was afterwards."""
    from multiprocessing import resource_tracker

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_stop_signals(worker_id: int = 0) -> None:
    """A DataLoader worker_init_fn: the worker outlives the signal; its parent ends it (or it notices that its
    parent has gone, which torch's workers check every few seconds)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def collect_write_results_here() -> None:
    """Have dist_checkpointing's writers report to a queue in this process instead of a Manager process (see the
    module's docstring). Right for synchronous saves, the only kind the trainer core makes: an asynchronous save
    (megatron.core's async_sharded_save) writes from another process, whose results would not arrive here, and
    megatron.core would then fail the save with "results_queue should not be empty". Idempotent."""
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if filesystem_async._results_queue is None:
        filesystem_async._results_queue = queue.Queue()
