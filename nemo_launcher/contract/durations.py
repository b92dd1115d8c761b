"""Durations as users write them in configs, parsed once for both sides.

    SlurmTime.parse("1-00:00:00", "training.run.time_limit").seconds   # 86400
    WallClock.parse("00:23:30:00", "training.trainer.max_time").seconds  # 84600

Each type is a `str` subclass that keeps the text as written (it is what Slurm or the trainer reads) and adds
`.seconds`. `bind` calls `parse` for fields annotated with these types.
"""

import re

from .binding import config_fault

# sbatch --time accepts: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_SLURM_FORMS = (
    (re.compile(r"^(\d+)$"), ("minutes",)),
    (re.compile(r"^(\d+):(\d{1,2})$"), ("minutes", "seconds")),
    (re.compile(r"^(\d+):(\d{1,2}):(\d{1,2})$"), ("hours", "minutes", "seconds")),
    (re.compile(r"^(\d+)-(\d{1,2})$"), ("days", "hours")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2})$"), ("days", "hours", "minutes")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2}):(\d{1,2})$"), ("days", "hours", "minutes", "seconds")),
)
_LIMITS = (("hours", 23), ("minutes", 59), ("seconds", 59))
_UNIT_SECONDS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}


class SlurmTime(str):
    """A job time limit in Slurm's syntax, e.g. "4:00:00" or "6-00:00:00"."""

    seconds: int

    @classmethod
    def parse(cls, value, key: str) -> "SlurmTime":
        text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        for pattern, units in _SLURM_FORMS if text is not None else ():
            match = pattern.match(text)
            if match:
                parts = dict(zip(units, (int(g) for g in match.groups())))
                # Only the leading unit may exceed its range ("48:00:00" is fine, "1-25:00" is not).
                if any(parts.get(unit, 0) > limit for unit, limit in _LIMITS if unit != units[0]):
                    break
                seconds = sum(_UNIT_SECONDS[unit] * number for unit, number in parts.items())
                if seconds <= 0:
                    break
                instance = cls(text)
                instance.seconds = seconds
                return instance
        raise config_fault(
            key,
            value,
            'use a Slurm time limit above zero: minutes, "H:MM:SS" or "D-HH:MM:SS", e.g. "4:00:00" or "6-00:00:00"',
        )


class WallClock(str):
    """The trainer's own stop time, "DD:HH:MM:SS" (trainer.max_time), as NeMo writes it."""

    seconds: int

    @classmethod
    def parse(cls, value, key: str) -> "WallClock":
        match = (
            re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})", str(value).strip()) if isinstance(value, str) else None
        )
        if match:
            days, hours, minutes, seconds = (int(g) for g in match.groups())
            total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
            if total == 0:
                # The trainer would save and stop before its first step, and a job that requeues itself after a
                # max_time stop would then start, stop and requeue forever.
                raise config_fault(
                    key,
                    value,
                    'stops the trainer before its first step: use a positive duration, e.g. "00:23:30:00", '
                    "or null for no limit",
                )
            if hours <= 23 and minutes <= 59 and seconds <= 59:
                instance = cls(str(value).strip())
                instance.seconds = total
                return instance
        raise config_fault(
            key, value, 'use "DD:HH:MM:SS" with hours <= 23 and minutes, seconds <= 59, e.g. "00:23:30:00", or null'
        )


def clock_text(seconds: int) -> str:
    """A duration as "H:MM:SS", or "D-HH:MM:SS" from one day on: how the plan shows a time limit, and a form
    `sbatch --time` reads."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}" if days else f"{hours}:{minutes:02d}:{seconds:02d}"
