"""The job side's error family: every error a user fixes from its message alone derives from JobError, and a job
program prints it as one `Error:` line (common/report.py's print_error) and exits with its exit_code.

    JobError                  exit 2 unless a subclass says otherwise
    +-- DataPrepError         a data step's bad key, bad input line or URL (steps/config.py's run_step prints it)
    |   +-- DataConfigError, TokenizerError, FetchError, RepositoryError, MalformedLine, MalformedInput, Mc4Error
    +-- JobFault              (common/report.py) stopped for a reason fixed outside the config: its own exit code
    |   +-- StorageFault, RunDirectoryInUse, GraphMismatch
    +-- HFExportError         (core/conversion.py) no exact Hugging Face counterpart; also a ValueError

A bad config value found while binding is the contract's JobConfigError (nemo_launcher.contract.binding), shared with
the launch side and so outside this family; print_error treats it the same way (one line, exit 2). Any other
exception is a bug and keeps its traceback.
"""


class JobError(Exception):
    """An error the user fixes from its text: one `Error:` line, exit status `exit_code`."""

    exit_code = 2


class DataPrepError(JobError):
    """Printed as one line by the step's entry point (full traceback with NEMO_LAUNCHER_FULL_ERROR=1).

    Any other exception is a bug in this package and keeps its traceback.
    """
