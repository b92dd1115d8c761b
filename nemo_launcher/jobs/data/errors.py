"""One base class for the errors a user fixes from the message alone: a bad key, a bad input line, a URL."""


class DataPrepError(Exception):
    """Printed as one line by the step's entry point (full traceback with NEMO_LAUNCHER_FULL_ERROR=1).

    Any other exception is a bug in this package and keeps its traceback.
    """
