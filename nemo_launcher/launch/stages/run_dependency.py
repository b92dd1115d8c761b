"""`run.dependency` as users write it (the seed launcher's words) -> the job spec's dependency kinds.

    parse_run_dependency("training.run.dependency", "singleton,afterany")
    # (Dependency.AFTER_ANY_END, (Wait(Dependency.SINGLETON),))

Items are comma-separated: `singleton`; a bare kind (afterok, afterany, afternotok, aftercorr) that says how this
stage waits for the stage before it (afterok when none is given); or `kind:jobid[:jobid...]` for outside jobs,
where kind may also be `after` (once they started). The words are the config's vocabulary, kept from the seed so
that its users feel at home; the job spec holds only `Dependency` members, and each backend renders those its way.
"""

import re
from datetime import timedelta

from ..errors import config_error
from ..job_spec import Dependency, Wait

# The config's words for each kind, as the seed launcher documented them.
CONFIG_WORDS = {
    "afterok": Dependency.AFTER_SUCCESS,
    "afterany": Dependency.AFTER_ANY_END,
    "afternotok": Dependency.AFTER_FAILURE,
    "aftercorr": Dependency.AFTER_CORRESPONDING_ITEM,
}
_OUTSIDE_WORDS = dict(CONFIG_WORDS, after=Dependency.AFTER_START)
_OUTSIDE_JOB = re.compile(r"^([a-z]+)((?::\d+(?:_\d+)?)+)$")
_FORMS = (
    "use comma-separated items: singleton, one of afterok/afterany/afternotok/aftercorr (how to wait for the "
    "previous stage), or type:jobid for an outside job (type one of after/afterok/afterany/afternotok/aftercorr)"
)


def parse_run_dependency(key: str, value) -> tuple[Dependency, tuple[Wait, ...]]:
    """(how to wait for the previous stage, fixed waits); a ConfigError naming `key` for anything else."""
    after_previous, waits = Dependency.AFTER_SUCCESS, []
    for item in str(value or "").split(","):
        item = item.strip()
        outside = _OUTSIDE_JOB.match(item)
        if not item:
            continue
        if item == "singleton":
            waits.append(Wait(Dependency.SINGLETON))
        elif item in CONFIG_WORDS:
            after_previous = CONFIG_WORDS[item]
        elif outside and outside.group(1) in _OUTSIDE_WORDS:
            waits.append(Wait(_OUTSIDE_WORDS[outside.group(1)], tuple(outside.group(2)[1:].split(":"))))
        else:
            raise config_error(key, value, _FORMS)
    return after_previous, tuple(waits)


def time_limit(run) -> timedelta:
    """run.time_limit (bound as contract.durations.SlurmTime, which parsed the config's text once) as a duration."""
    return timedelta(seconds=run.time_limit.seconds)
