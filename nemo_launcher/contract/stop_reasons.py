"""Why a training attempt stopped before its last step: written by the trainer in its log, read back by `status`.

    signal_stop_reason("SIGUSR1")                  # "signal SIGUSR1 received"       (job side)
    stopped_title(40, 1000, reason, follow_up)     # the closing summary's first line (job side)
    restart_cause(log_text)                        # "time limit", or None            (launcher side)

Slurm's accounting records a requeued attempt as REQUEUED, not why: the launcher's scripts requeue a job that
stopped early after saving (RESUME_MARKER), and only the attempt knows what stopped it. Its log's closing summary
says so in the title written here, so `status` can read the cause back without restating the trainer's words.
"""

import re

STOPPED_PREFIX = "training stopped at step="
# The time-limit warning: the launcher's scripts ask Slurm for SIGUSR1 cluster.signal_seconds_before_limit before
# the limit (#SBATCH --signal=USR1@N), so an attempt stopped by it ran into its time limit.
TIME_LIMIT_SIGNAL = "SIGUSR1"
_TITLE = re.compile(re.escape(STOPPED_PREFIX) + r"\d+ of \d+: (?P<reason>[^;]+);")
# The reason the trainer gave -> the restart's cause as `status` shows it.
_CAUSES = (
    (re.compile(rf"^signal {TIME_LIMIT_SIGNAL} received$"), "time limit"),
    (re.compile(r"^signal SIGTERM received$"), "SIGTERM"),
    (re.compile(r"^signal .* received$"), "signal"),
    (re.compile(r"^trainer\.max_time .* reached$"), "max_time"),
)


def signal_stop_reason(signal_name: str) -> str:
    """`signal_name` as Python names it (SIGTERM), or words such as "on another rank" when a peer got it."""
    return f"signal {signal_name} received"


def max_time_stop_reason(max_time: str) -> str:
    return f"trainer.max_time {max_time} reached"


def stopped_title(step: int, max_steps: int, reason: str, follow_up: str) -> str:
    return f"{STOPPED_PREFIX}{step} of {max_steps}: {reason}; {follow_up}"


def restart_cause(log_text: str) -> str | None:
    """What stopped the attempt whose log this is, in a word or two; None when its log does not say (it did not
    stop by itself: a node failed, the job was preempted or requeued by hand, or it is cut short)."""
    titles = list(_TITLE.finditer(log_text))
    if not titles:
        return None
    reason = titles[-1]["reason"].strip()
    return next((cause for pattern, cause in _CAUSES if pattern.match(reason)), reason)
