"""The body of a heterogeneous job's script (JobSpec.groups), the same on every backend that runs one: the groups start
together in the background, and a monitor ends the job when the first of them ends, with that group's exit status.

    lines = group_lines(spec, start_line, kill_target)   # a backend's render() adds these after its environment

`start_line(group, index)` is the backend's command that starts one group (`srun --het-group=<i> ...` on Slurm, the
program in a session of its own here) and must leave the started process's id in `$!`. `kill_target(pid)` gives the
`kill` operands that reach all of a group from that pid (the srun on Slurm, which passes signals on to its tasks; the
whole process group here). A group still running after the grace period (spec.stop_grace) is sent SIGTERM, then
SIGKILL 10 s later, so that no process outlives the job. Why the first exit ends everything: the
seed's RLHF roles serve each other, so one that dies leaves the rest waiting for it until the time limit.
"""

from collections.abc import Callable

from ..job_spec import JobGroup, JobSpec
from ..shell import quote

# Seconds between the monitor's looks at the groups: short against a job's hours, long against a CPU's work.
POLL_S = 1
# Seconds a group has between SIGTERM and SIGKILL once its grace period is over.
KILL_AFTER_S = 10


def group_lines(
    spec: JobSpec, start_line: Callable[[JobGroup, int], str], kill_target: Callable[[str], str]
) -> list[str]:
    target = kill_target('"${pid}"')
    grace = int(spec.stop_grace.total_seconds())
    lines = ["", "# The job's groups, started together; the first to end ends the job with its exit status."]
    lines += ["group_names=()", "group_pids=()"]
    for index, group in enumerate(spec.groups):
        lines += [
            start_line(group, index),
            'group_pids+=("$!")',
            f"group_names+=({quote(group.name)})",
            f'echo "[monitor] started {group.name} (pid $!)"',
        ]
    lines += [
        "",
        "first_name=''",
        "first_status=0",
        'while [[ -z "${first_name}" ]]; do',
        '  for index in "${!group_pids[@]}"; do',
        '    if ! kill -0 "${group_pids[index]}" 2>/dev/null; then',
        '      wait "${group_pids[index]}" || first_status=$?',
        '      first_name="${group_names[index]}"',
        "      break",
        "    fi",
        "  done",
        f'  [[ -n "${{first_name}}" ]] || sleep {POLL_S}',
        "done",
        f'echo "[monitor] ${{first_name}} ended with status ${{first_status}}; the other groups get {grace} s to end"',
        *_driver_lines(spec, grace),
        "",
        "alive() {",
        "  local pid",
        '  for pid in "${group_pids[@]}"; do',
        f"    if kill -0 {target} 2>/dev/null; then return 0; fi",
        "  done",
        "  return 1",
        "}",
        f"deadline=$((SECONDS + {grace}))",
        f"while alive && ((SECONDS < deadline)); do sleep {POLL_S}; done",
        "for signal in TERM KILL; do",
        '  for index in "${!group_pids[@]}"; do',
        '    pid="${group_pids[index]}"',
        f"    if kill -0 {target} 2>/dev/null; then",
        '      echo "[monitor] sending SIG${signal} to ${group_names[index]}"',
        f'      kill -s "${{signal}}" {target} 2>/dev/null || true',
        "    fi",
        "  done",
        f'  if [[ "${{signal}}" == TERM ]]; then deadline=$((SECONDS + {KILL_AFTER_S})); fi',
        f'  while [[ "${{signal}}" == TERM ]] && alive && ((SECONDS < deadline)); do sleep {POLL_S}; done',
        "done",
        "wait 2>/dev/null || true",
    ]
    return lines


def _driver_lines(spec: JobSpec, grace: int) -> list[str]:
    """With a driver group: a group that ended well before it (a server the driver shut down as it finished) leaves
    the driver the grace period to end, and the job takes the driver's status; a driver still running then is an
    error of the job (status 1): a server should not end while it is needed."""
    if spec.driver_group is None:
        return []
    index = [group.name for group in spec.groups].index(spec.driver_group)
    driver = quote(spec.driver_group)
    return [
        f'if [[ "${{first_name}}" != {driver} && "${{first_status}}" == 0 ]]; then',
        f"  deadline=$((SECONDS + {grace}))",
        f'  while kill -0 "${{group_pids[{index}]}}" 2>/dev/null && ((SECONDS < deadline)); do sleep {POLL_S}; done',
        f'  if kill -0 "${{group_pids[{index}]}}" 2>/dev/null; then',
        f'    echo "[monitor] ${{first_name}} ended while {spec.driver_group} still ran: the job fails"',
        "    first_status=1",
        "  else",
        f'    wait "${{group_pids[{index}]}}" || first_status=$?',
        f"    first_name={driver}",
        f'    echo "[monitor] {spec.driver_group} ended with status ${{first_status}}"',
        "  fi",
        "fi",
    ]


def exit_lines() -> list[str]:
    return ['exit "${first_status}"']


def host_exports(spec: JobSpec, host_of: Callable[[int], str]) -> list[str]:
    """`export <host_variable>=<first host of that group>` for every group that names a variable; `host_of(index)` is
    the backend's shell expression for it."""
    lines = []
    for index, group in enumerate(spec.groups):
        if group.host_variable:
            lines += [f"{group.host_variable}={host_of(index)}", f"export {group.host_variable}"]
    return lines
