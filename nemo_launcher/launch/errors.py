"""User-facing errors: one base class, printed as a single line (full traceback with NEMO_LAUNCHER_FULL_ERROR=1)."""


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
    """A job could not be submitted; jobs this command already submitted have been cancelled."""

    exit_code = 3


class StageFailed(LauncherError):
    """A stage run on this machine (interactive) exited non-zero; later stages were not run."""

    exit_code = 4


class RunInProgress(LauncherError):
    """Jobs of a run this command would submit again are still queued or running; nothing was written."""

    exit_code = 5
