"""What every job program that writes into a run directory does around its work.

    with claimed(Path(cfg.exp_manager.explicit_log_dir), placement.rank, placement.world_size):
        ...train, convert, evaluate or export...

- Global rank 0 takes the directory's lock (run_lock.py) before anything is written, and gives it back on the
  way out, whatever the way out: a return, an exception, or SIGTERM/SIGUSR1 outside the training loop, which
  here raise SystemExit(128 + signal) so that the `finally` blocks run. (Only SIGKILL leaves a lock behind; the
  next job recognises it as stale.) A second writer stops with RunDirectoryInUse (exit 75) before touching
  anything.
- The other ranks never take the lock; they wait until it names their job (rank 0 has it), so no rank writes
  before rank 0 holds the directory. When rank 0 of several (world_size > 1) is refused it waits
  REFUSAL_GRACE_S, then exits, and srun (--kill-on-bad-exit) or torchrun stops the others with SIGTERM; a
  rank that then finds the lock held by another live job exits 75 as well, so srun reports 75 for the whole
  step. The grace is for ranks still starting: one that gets the SIGTERM before its handler is in place dies
  of it, and srun then reports 143 (seen on a loaded node). They wait in Python, where the signal handler
  runs at once: in the process group's rendezvous it would wait for a C++ call that never returns, until
  Slurm's SIGKILL.
- An OSError about space or permission that escapes the block becomes a StorageFault (exit 74), one line
  naming the path instead of a traceback.
- A rank that stops for a fault (JobFault: 74, 75) keeps that exit status when srun or torchrun, seeing another
  rank exit first, send it SIGTERM on its way out.
- claimed_run starts Python's multiprocessing resource tracker first, deaf to SIGUSR1 (helper_processes.py):
  started later by a DataLoader or a checkpoint save, it died of the time-limit warning and the next save
  relaunched it with a warning in every requeued attempt's log.

Standard library only: it runs before torch is imported.
"""

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...contract import RUN_DIRECTORY_IN_USE_EXIT_CODE
from .config import config_path_from_argv, load_resolved_config
from .distributed import Placement, placement_from_env
from .helper_processes import STOP_SIGNALS, start_resource_tracker
from .quiet import start_job
from .report import JobFault
from .run_lock import RunDirectoryInUse, RunDirectoryLock
from .storage import storage_errno, write_fault

log = logging.getLogger(__name__)

# How long ranks other than 0 wait for rank 0 to take the lock (on NFS, seeing a file created on another node can
# take the attribute cache's time, up to a minute); after that they go on, and the rendezvous waits for rank 0.
RANK_ZERO_WAIT_S = 300.0
# How long a refused rank 0 of a several-process step waits before exiting, so that the other ranks (started at
# the same time, a second or two from their handlers, more on a loaded or container-starting node) have them.
REFUSAL_GRACE_S = 10.0


@contextlib.contextmanager
def claimed_run(
    argv, prog: str, bind: Callable[[dict], Any], run_dir: Callable[[Any], Any]
) -> Iterator[tuple[Any, Placement]]:
    """The start every job program shares: the resolved config that argv names, bound by `bind`, with this process
    placed and its logging set up, inside the claim on the run directory run_dir(bound config).
    Yields (bound config, placement)."""
    path = config_path_from_argv(argv, prog=prog)
    placement = placement_from_env()
    start_job(placement.rank)
    start_resource_tracker()
    cfg = bind(load_resolved_config(path))
    with claimed(run_dir(cfg), placement.rank, placement.world_size):
        yield cfg, placement


@contextlib.contextmanager
def claimed(directory, rank: int, world_size: int = 1) -> Iterator[RunDirectoryLock]:
    lock = RunDirectoryLock(Path(directory))
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    owner = os.getpid()

    def stop(signum, frame):
        if os.getpid() != owner:
            # A forked child (e.g. a multiprocessing.Pool worker of lm-eval) inherited this handler: there the
            # signal means what it always means, or Pool.terminate() would wait for ever on a worker that survived.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if isinstance(sys.exc_info()[1], (JobFault, SystemExit)):
            # Already on its way out for a reason of its own (a rank that stopped first made srun or torchrun
            # signal this one): that reason's exit status stands.
            return
        if rank != 0 and lock.held_by_another_live_job():
            raise SystemExit(RUN_DIRECTORY_IN_USE_EXIT_CODE)
        raise SystemExit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    faulted = False
    try:
        if rank == 0:
            try:
                _acquire(lock)
            except RunDirectoryInUse:
                # Inside the except block a stop signal leaves the refusal's exit status standing (stop() above).
                if world_size > 1:
                    time.sleep(REFUSAL_GRACE_S)
                raise
        elif lock.wait_for_own_job(RANK_ZERO_WAIT_S) is False:
            log.warning("rank 0 has not taken %s within %.0f s; going on", lock.path, RANK_ZERO_WAIT_S)
        try:
            yield lock
        except OSError as error:
            cause = storage_errno(error)
            if cause is None:
                raise
            raise write_fault(cause, lock.directory) from error
        finally:
            if rank == 0:
                with _stop_signals_blocked():
                    lock.release()
    except JobFault:
        faulted = True
        raise
    finally:
        # After a fault, stop signals are ignored until the process ends: srun or torchrun signal this rank when
        # another one exits first with the same fault, and the default action (which Python also puts back while
        # it shuts down) would end it with SIGTERM instead of the fault's status. SIGKILL still ends a hung rank.
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if faulted else handler)


def _acquire(lock: RunDirectoryLock) -> None:
    # Blocked meanwhile: a SystemExit between renaming a stale lock aside and putting back one that turned out to
    # be live would lose another job's lock. A signal that arrives is delivered once the lock is settled.
    with _stop_signals_blocked():
        try:
            taken_over = lock.acquire()
        except OSError as error:
            cause = storage_errno(error)
            if cause is None:
                raise
            raise write_fault(cause, lock.directory) from error
    if taken_over is not None:
        log.info("took over %s, stale: %s", lock.path, taken_over)


@contextlib.contextmanager
def _stop_signals_blocked():
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
