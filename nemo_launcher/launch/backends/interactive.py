"""Interactive backend: runs the job script on this machine with bash, one stage after another."""

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import StageFailed, StageInterrupted, config_error
from ..job_spec import Command, JobGroup, JobSpec, Wait
from ..shell import join, quote
from .base import PYTHON, Backend
from .groups import exit_lines, group_lines, host_exports


class InteractiveBackend(Backend):
    name = "interactive"
    queues_jobs = False
    # Seconds a stage stopped by Ctrl-C or SIGTERM may take to exit (save, flush its log) before it is killed.
    stop_grace_s = 30.0

    def log_pattern(self, spec: JobSpec, job_id: str | None) -> str:
        return f"{self.log_base(spec)}_<YYYYmmdd_HHMMSS>_<pid>.out"

    def validate(self, specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
        for specs in specs_by_stage:
            for spec in specs:
                for name, nodes in [(group.name, group.nodes) for group in spec.groups] or [(None, spec.nodes)]:
                    if nodes > 1:
                        raise config_error(
                            f"{spec.stage} nodes" + (f" of its {name} group" if name else ""),
                            nodes,
                            "cluster_type=interactive runs on this machine only: use 1 node, or cluster_type=bcm",
                        )
        super().validate(specs_by_stage)

    def command_line(self, spec: JobSpec, command: Command, tasks_per_node: int | None = None) -> str:
        tasks = spec.tasks_per_node if tasks_per_node is None else tasks_per_node
        if command.distributed and tasks > 1:
            # torchrun, started through the same interpreter so that no separate executable must be on PATH.
            launcher = f"{PYTHON} -m torch.distributed.run --standalone --nproc_per_node={tasks}"
            return f"{launcher} -m {quote(command.module)} {join(command.args)}".rstrip()
        return f"{PYTHON} -u -m {quote(command.module)} {join(command.args)}".rstrip()

    def render(self, spec: JobSpec) -> str:
        if spec.groups:
            return self.render_groups(spec)
        lines = self._head(spec, "# One log per run: a rerun never overwrites an earlier log.")
        for command in spec.commands:
            lines += ["", f'{self.command_line(spec, command)} 2>&1 | tee -a "${{log_stem}}.out"']
        return "\n".join(lines) + "\n"

    def _head(self, spec: JobSpec, log_comment: str) -> list[str]:
        """The script's start: the shell options, the environment (each group's host too), and the log's stem."""
        return [
            "#!/bin/bash",
            f"# Written by nemo_launcher ({spec.stage} stage). Runs on this machine: bash <this file>",
            "set -euo pipefail",
            "",
            *self.environment_lines(spec),
            *host_exports(spec, lambda index: "localhost"),
            "",
            log_comment,
            f'log_stem={quote(str(self.log_base(spec)))}_"$(date +%Y%m%d_%H%M%S)_$$"',
        ]

    def render_groups(self, spec: JobSpec) -> str:
        """A heterogeneous job here: every group is a process tree of its own on this machine (its own session, so
        that the monitor can stop all of it), found by the others at localhost; each writes its own log, and its lines
        reach this terminal prefixed with its name."""
        lines = self._head(spec, "# One log per group and run: a rerun never overwrites an earlier log.")

        def start(group: JobGroup, index: int) -> str:
            log = f'"${{log_stem}}_{group.name}.out"'
            prefix = quote(f"s/^/[{group.name}] /")
            command = self.command_line(spec, group.command, group.tasks_per_node)
            return f"setsid {command} > >(tee -a {log} | sed -u {prefix}) 2>&1 &"

        lines += group_lines(spec, start, lambda pid: f"-- -{pid}")  # the group's whole session
        return "\n".join(lines + exit_lines()) + "\n"

    def submit(self, script: Path, spec: JobSpec, waits: Sequence[Wait], tag: str | None = None) -> str | None:
        environ = dict(os.environ, NEMO_LAUNCHER_PYTHON=sys.executable)
        print(f"Running {spec.stage} job {spec.name} here: bash {script}", flush=True)
        # Its own session, so that the launcher alone decides how the job is stopped (a SIGTERM sent to the
        # launcher would otherwise leave it running) and can still stop all of it: torchrun, its workers, tee.
        process = subprocess.Popen(["bash", str(script)], cwd=str(spec.directory), env=environ, start_new_session=True)
        try:
            returncode = process.wait()
        except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (interrupts.Interrupted)
            import signal

            from ..interrupts import describe

            signal_number = getattr(interrupt, "signal_number", signal.SIGINT)
            self._stop(process, signal_number)
            raise StageInterrupted(
                f"stage {spec.stage!r} (job {spec.name}) was stopped by {describe(signal_number)}; later stages were "
                f"not run. Its log is {self.log_pattern(spec, None)}",
                signal_number,
            ) from None
        if returncode != 0:
            raise StageFailed(
                f"stage {spec.stage!r} (job {spec.name}) exited with status {returncode}; "
                f"later stages were not run. Its log is {self.log_pattern(spec, None)}",
                returncode,
            )
        return None

    def _stop(self, process: subprocess.Popen, signal_number: int) -> None:
        """Passes the signal on to every process of the job, and kills what is left after `stop_grace_s`. Returns
        once the whole group has ended: bash itself ends at once on SIGHUP, before the programs it started."""
        import signal

        from ..interrupts import signals_deferred

        with signals_deferred(f"stopping the running stage (at most {self.stop_grace_s:.0f} s)"):
            deadline = time.monotonic() + self.stop_grace_s
            _signal_group(process.pid, signal_number)
            try:
                process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
            while _group_alive(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _signal_group(process.pid, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    """Whether a process of `group` still runs. Zombies do not count: where PID 1 never reaps orphans (some
    containers), a dead member would otherwise keep the group alive for the whole grace period."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def _signal_group(pid: int, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # every process of the group has ended
        os.killpg(pid, signal_number)
