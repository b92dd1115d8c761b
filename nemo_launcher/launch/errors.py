"""User-facing errors: one base class, printed as a single line (full traceback with NEMO_LAUNCHER_FULL_ERROR=1).

Exit codes of `python3 main.py`:
    0    submitted (or, on cluster_type=interactive, every stage finished)
    1    a problem the user can fix (LauncherError): Slurm missing, preflight failed, ...
    2    the configuration is invalid (ConfigError); nothing was written
    3    the submission failed or was interrupted (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT, an I/O error, any error) after
         it began:
         every job this command had queued was cancelled and its ledger record closed as rolled_back
    4    a stage run here (interactive) exited non-zero; later stages were not run
    5    jobs of this run are still queued or running; nothing was written
    6    the launcher cannot write where it must: a write failed (disk full, read-only, no permission), or a run
         directory belongs to another user or is not writable; nothing is left half-written
    130  (129 SIGHUP, 131 SIGQUIT, 143 SIGTERM) a stage run here was stopped by Ctrl-C; later stages were not run
"""

import os


class LauncherError(Exception):
    """A problem the user can fix. Its message names the key, the bad value and the fix."""

    exit_code = 1


class ConfigError(LauncherError):
    """The composed configuration is invalid; raised before anything is written or submitted."""

    exit_code = 2


def config_error(key: str, value, fix: str) -> ConfigError:
    """Builds the one-line message every validation error uses: key, value, fix."""
    return ConfigError(f"{key}={value!r}: {fix}")


class SubmissionError(LauncherError):
    """A submission failed or was interrupted after it began; every job it had queued was cancelled. Whatever
    stopped it (a failed sbatch, Ctrl-C, SIGTERM, a failed write, any error), the message says what it was and
    lists the cancelled job ids."""

    exit_code = 3


class StageFailed(LauncherError):
    """A stage run on this machine (interactive, bcp) exited non-zero; later stages were not run. `exit_status`
    is the stage's own exit status (the ledger records it); the launcher itself exits 4."""

    exit_code = 4

    def __init__(self, message: str, exit_status: int = 1):
        super().__init__(message)
        self.exit_status = exit_status


class RunInProgress(LauncherError):
    """Jobs of a run this command would submit again are still queued or running; nothing was written."""

    exit_code = 5


class WriteError(LauncherError):
    """The launcher cannot write its own files (disk full, read-only, permission, another user's run dir). It is
    raised before anything is queued, or turned into a rollback (exit 3) once something is. The message names
    the path; nothing is left half-written."""

    exit_code = 6


def write_error(path, error: OSError) -> WriteError:
    """`cannot write <path>: <strerror>`."""
    return WriteError(f"cannot write {os.fsdecode(path)}: {error.strerror or error}")


class StageInterrupted(LauncherError):
    """A stage run on this machine was stopped by a signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT); later stages were not
    run. The exit code follows the shell's convention, 128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""

    exit_code = 130

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number
