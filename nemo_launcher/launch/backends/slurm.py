"""Slurm backend (cluster_type=bcm): an sbatch script with one srun per command, submitted with `sbatch --parsable`."""

import contextlib
import dataclasses
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ...contract.durations import clock_text
from ...contract.file_numbers import slurm_array
from ..cluster_settings import CLUSTER_SETTINGS, check_signal_lead, signal_lead_seconds
from ..errors import LauncherError, SubmissionError, config_error
from ..job_spec import Dependency, JobGroup, JobSpec, Wait
from ..shell import join, quote
from ..writes import append_text
from .base import Backend, python_words
from .groups import exit_lines, group_lines, host_exports

# Keys of conf/cluster/bcm.yaml that the launcher itself interprets; any other key is passed to sbatch as is.
KNOWN_CLUSTER_KEYS = tuple(CLUSTER_SETTINGS)
# Where a stage's processes per node come from, for the message when they outnumber the GPUs of a node.
_PROCESSES_PER_NODE_KEY = {"training": "trainer.devices", "fine_tuning": "trainer.devices", "peft": "trainer.devices"}
# sbatch failures worth retrying: the controller was busy or briefly unreachable.
TRANSIENT_SBATCH_ERRORS = re.compile(
    r"(Socket timed out|temporarily unavailable|Unable to contact slurm controller|try again|"
    r"Connection refused|Transport endpoint is not connected|Slurm backup controller in standby)",
    re.IGNORECASE,
)
# Slurm's dependency types for the job spec's kinds (sbatch --dependency=<type>:<id>[:<id>...]).
DEPENDENCY_TYPES = {
    Dependency.AFTER_SUCCESS: "afterok",
    Dependency.AFTER_ANY_END: "afterany",
    Dependency.AFTER_FAILURE: "afternotok",
    Dependency.AFTER_CORRESPONDING_ITEM: "aftercorr",
    Dependency.AFTER_START: "after",
    Dependency.SINGLETON: "singleton",
}
_SBATCH_SAFE = re.compile(r"^[A-Za-z0-9_./:%@,+=-]+$")


def sbatch_word(value) -> str:
    """Quotes a value for an #SBATCH line. sbatch reads these lines itself (not bash): it understands
    double quotes and backslash escapes, not single quotes, and a value can never span lines."""
    text = str(value)
    if _SBATCH_SAFE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def slurm_filename(path) -> str:
    """A path as a literal part of a Slurm filename pattern: Slurm expands `%j`, `%A`, `%x`, ... in --output and
    reads `%%` as one `%`. (A backslash would turn every pattern off and vanish: validate refuses it.)"""
    return str(path).replace("%", "%%")


def slurm_memory(mem) -> str | None:
    """0 means all the memory of the node; an integer N means N GB; text is passed through (cluster_settings
    has checked the value)."""
    if mem is None:
        return None
    if isinstance(mem, int):
        return "0" if mem == 0 else f"{mem}G"
    return str(mem)


def slurm_dependency(waits) -> list[str]:
    """`afterok:123`, `aftercorr:7:8`, `singleton`: one --dependency item per wait, in order."""
    return [":".join((DEPENDENCY_TYPES[wait.kind], *wait.job_ids)) for wait in waits]


def slurm_time(spec: JobSpec) -> str:
    """--time as H:MM:SS, or D-HH:MM:SS from one day on (Slurm reads both)."""
    return clock_text(int(spec.time_limit.total_seconds()))


class SlurmBackend(Backend):
    name = "bcm"
    queues_jobs = True
    pipeline_kinds = frozenset(DEPENDENCY_TYPES)
    waits_for_outside_jobs = True
    retry_delays = (2.0, 5.0, 10.0)  # seconds to wait before each retry of a transient sbatch failure
    # Seconds one sbatch (or the squeue of a tag look-up) may take; sbatch retries a busy controller itself
    # for about a minute, so a call that has not answered by then is counted as a transient failure.
    sbatch_timeout_s = 120.0
    # Seconds an interrupted launcher waits for a running sbatch to say which job it queued.
    finish_grace_s = 10.0

    def __init__(self, context):
        super().__init__(context)  # self.queued: submission tag -> job id, submitted or adopted
        # Tags of sbatch calls that ended without saying whether they queued their job (interrupted, timed out,
        # or the look-up failed).
        self.unsettled: set[str] = set()

    def job_name(self, spec: JobSpec) -> str:
        return f"{self.context.cluster.get('job_name_prefix') or ''}{spec.name}"

    def log_pattern(self, spec: JobSpec, job_id: str | None) -> str:
        tag = job_id or "<id>"
        if spec.is_array:
            tag += "_<index>"
        return f"{self.log_base(spec)}_{tag}_attempt<n>.out"

    def sbatch_parameters(self, spec: JobSpec) -> dict[str, object]:
        """The #SBATCH parameters; True gives a bare flag, None leaves the parameter out."""
        cluster = self.context.cluster
        base = slurm_filename(self.log_base(spec))
        batch_log = f"{base}_%A_%a" if spec.is_array else f"{base}_%j"
        parameters = {
            "job-name": self.job_name(spec),
            "nodes": spec.nodes,
            "ntasks-per-node": spec.tasks_per_node,
            "cpus-per-task": spec.cpus_per_task,
            "time": slurm_time(spec),
            "partition": cluster.get("partition"),
            "account": cluster.get("account"),
            "exclusive": True if cluster.get("exclusive") else None,
            "overcommit": True if cluster.get("overcommit") else None,
            "mem": slurm_memory(cluster.get("mem")),
            "gpus-per-node": (spec.gpus_per_node or cluster.get("gpus_per_node")) if spec.uses_gpus else None,
            # A job that names its own GPU count takes just those, whatever the cluster gives each task.
            "gpus-per-task": cluster.get("gpus_per_task") if spec.uses_gpus and spec.gpus_per_node is None else None,
            "array": self.array_words(spec),
            "dependency": ",".join(slurm_dependency(_held_waits(spec, spec.waits))) or None,
            # A job whose dependency can never be met (its upstream stage failed) is cancelled, not left PENDING.
            "kill-on-invalid-dep": "yes",
            # Requeued attempts append to the batch log instead of truncating it.
            "open-mode": "append",
            "output": f"{batch_log}.out",
            "error": f"{batch_log}.err",
        }
        if spec.requeue_marker:
            parameters["requeue"] = True
        if spec.checkpoint_signal:
            parameters["signal"] = f"USR1@{signal_lead_seconds(cluster)}"
        for key, value in cluster.items():
            if key not in KNOWN_CLUSTER_KEYS and value is not None:
                print(
                    f"Warning: cluster.{key} is not a setting the launcher knows ({', '.join(KNOWN_CLUSTER_KEYS)}); "
                    f"passing it to sbatch as --{key.replace('_', '-')}",
                    file=sys.stderr,
                )
                parameters[key.replace("_", "-")] = value
        return {key: value for key, value in parameters.items() if value is not None and value is not False}

    def sbatch_lines(self, spec: JobSpec) -> list[str]:
        if spec.groups:
            return self.het_sbatch_lines(spec)
        return _option_lines(self.sbatch_parameters(spec))

    def het_sbatch_lines(self, spec: JobSpec) -> list[str]:
        """A heterogeneous job: the first component carries the job's own options (name, logs, dependency, requeue)
        with the first group's resources; each further group is a `hetjob` component with its own nodes, tasks and
        GPUs and the options Slurm does not carry over from the first (time, partition, memory, the warning signal).
        Slurm gives each component nodes of its own."""
        lines: list[str] = []
        for index, group in enumerate(spec.groups):
            sized = dataclasses.replace(
                spec,
                groups=(),
                commands=(group.command,),
                nodes=group.nodes,
                tasks_per_node=group.tasks_per_node,
                waits=tuple(_held_waits(spec, spec.waits)),
            )
            parameters = self.sbatch_parameters(sized)
            if index:
                lines.append("hetjob")
                parameters = {key: value for key, value in parameters.items() if key in _PER_COMPONENT}
            lines += _option_lines(parameters)
        return lines

    def dependency_words(self, waits: Sequence[Wait]) -> list[str]:
        return slurm_dependency(waits)

    def array_words(self, spec: JobSpec) -> str | None:
        """--array: the items, `%limit` when at most that many run at once ("0-29%30")."""
        return slurm_array(spec.array_items, spec.array_limit) if spec.is_array else None

    def time_words(self, spec: JobSpec) -> str:
        return slurm_time(spec)

    def validate(self, specs_by_stage: Sequence[Sequence[JobSpec]]) -> None:
        for specs in specs_by_stage:
            for spec in specs:
                self._check_log_path(spec)
                self._check_processes_fit_gpus(spec)
                if spec.checkpoint_signal:
                    check_signal_lead(self.context.cluster, spec.stage, int(spec.time_limit.total_seconds()))
        super().validate(specs_by_stage)

    def _check_log_path(self, spec: JobSpec) -> None:
        # (cluster.job_name_prefix, the rest of every log name, is checked with the cluster section.)
        for key, value in (("name", spec.name), ("results_dir", str(spec.directory))):
            if re.search(r"[\n\r\0\\]", value):
                raise config_error(
                    f"{spec.stage}.run.{key}",
                    value,
                    "Slurm cannot write a log to a path holding a line break or a backslash (it drops backslashes "
                    "from --output and then expands nothing); remove it",
                )

    def _check_processes_fit_gpus(self, spec: JobSpec) -> None:
        """One process per GPU: a job that starts more processes on a node than the node has GPUs would share
        GPUs between ranks (or fail to find its device). Fewer is fine: conversion and evaluation start
        ceil(TP x PP / nodes) processes, and a small run may use part of a node."""
        gpus = self.context.cluster.get("gpus_per_node")
        if not spec.uses_gpus or gpus is None or spec.tasks_per_node <= gpus:
            return
        source = _PROCESSES_PER_NODE_KEY.get(spec.stage, "run.ntasks_per_node")
        key = f"{spec.stage}.{source}"
        if source == "trainer.devices":
            fix = f"{key} must equal cluster.gpus_per_node (one process per GPU); set one to the other"
        else:
            fix = (
                f"{key} must be at most cluster.gpus_per_node (one process per GPU); "
                "lower it or raise cluster.gpus_per_node"
            )
        raise config_error(
            key,
            spec.tasks_per_node,
            f"the {spec.stage} job starts {spec.tasks_per_node} processes per node, "
            f"but cluster.gpus_per_node={gpus}; {fix}",
        )

    def srun_line(self, spec: JobSpec, command, group: tuple[int, JobGroup] | None = None) -> str:
        words = ["srun", "--kill-on-bad-exit=1"]
        log = "${log_stem}"
        if group is not None:
            index, member = group
            # Each group is a world of its own: its first host and a port of its own for torch.distributed.
            words = [f'MASTER_ADDR="${{group_host_{index}}}"', f'MASTER_PORT="$((MASTER_PORT + {index}))"', *words]
            words.append(f"--het-group={index}")
            log = f"${{log_stem}}_{member.name}"
        elif not command.distributed:
            words += ["--nodes=1", "--ntasks=1"]
        if self.context.container:
            hosts = [group.host_variable for group in spec.groups if group.host_variable]
            names = self.exported_names(spec) + hosts + ["MASTER_ADDR", "MASTER_PORT"]
            words += [
                f"--container-image={quote(self.context.container)}",
                f"--container-mounts={quote(','.join(self.context.mounts))}",
                "--no-container-mount-home",
                f"--container-env={quote(','.join(names))}",
            ]
        words.append(join(self.context.cluster.get("srun_args") or []))
        words.append(python_words(command))
        # The shell writes the step's logs, not srun --output: srun would read a `%` of the path as a filename
        # pattern, and it does not keep `%%` literal either.
        words.append(f'>>"{log}.out" 2>>"{log}.err"')
        return " ".join(word for word in words if word)

    def render(self, spec: JobSpec) -> str:
        job_tag = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' if spec.is_array else '"${SLURM_JOB_ID}"'
        lines = ["#!/bin/bash"]
        lines += [f"#SBATCH {line}" for line in self.sbatch_lines(spec)]
        lines += [
            f"# Written by nemo_launcher ({spec.stage} stage). Resubmit by hand with: sbatch <this file>",
            "set -euo pipefail",
            "",
            *self.environment_lines(spec),
            'MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"',
            "export MASTER_ADDR",
            'export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"',
            "",
            "# One log per attempt: a requeue (SLURM_RESTART_COUNT) or a new job never overwrites an earlier log.",
            f'log_stem={quote(str(self.log_base(spec)))}_{job_tag}_attempt"${{SLURM_RESTART_COUNT:-0}}"',
        ]
        if spec.groups:
            lines += [
                "",
                "# Each group's first host: where the other groups find its server, and its torch.distributed master.",
                *[
                    f'group_host_{index}="$(scontrol show hostnames "${{SLURM_JOB_NODELIST_HET_GROUP_{index}}}" '
                    '| head -n 1)"'
                    for index in range(len(spec.groups))
                ],
                *host_exports(spec, lambda index: f'"${{group_host_{index}}}"'),
            ]
            lines += group_lines(
                spec, lambda group, index: self.srun_line(spec, group.command, (index, group)) + " &", lambda pid: pid
            )
        for command in () if spec.groups else spec.commands:
            lines += ["", self.srun_line(spec, command)]
        if spec.requeue_marker:
            lines += [
                "",
                "# The job stopped before its last step (time limit, max_time) and saved a checkpoint: "
                "queue the next attempt.",
                f"if [[ -f {quote(str(spec.requeue_marker))} ]]; then",
                '  scontrol requeue "${SLURM_JOB_ID}"',
                "fi",
            ]
        if spec.groups:
            lines += exit_lines()
        return "\n".join(lines) + "\n"

    def check_environment(self) -> None:
        if shutil.which("sbatch") is None:
            raise LauncherError(
                "cluster_type=bcm needs Slurm, but `sbatch` is not on PATH. Run this on the cluster's login node, "
                "make a dry run with NEMO_LAUNCHER_DEBUG=1, or run here with cluster_type=interactive."
            )
        if self.context.container and not _srun_has_pyxis():
            raise LauncherError(
                f"container={self.context.container!r} needs the pyxis plugin, but `srun --help` has no "
                "--container-image option on this cluster. Install pyxis/enroot, or set container=null to run "
                "on the nodes' own Python."
            )

    def submit(self, script: Path, spec: JobSpec, waits: Sequence[Wait], tag: str | None = None) -> str | None:
        """`sbatch --parsable`, retried on transient failures. The call carries `tag` (unique to this command and
        job: `nemo-launcher:<ledger id>:<job index>`) in --comment, on the command line so that the script stays
        byte-identical to its dry run. When sbatch fails ambiguously, times out or prints no id, one `squeue`
        looks the tag up before anything is retried, and a job that did get queued is adopted instead of being
        submitted a second time. --comment because every Slurm keeps it for every job and shows it in squeue
        (%k), and nothing enforces it; a --wckey is checked against accounting where TrackWCKey is on."""
        tag = tag or f"nemo-launcher:{os.urandom(4).hex()}:0"
        argv = ["sbatch", "--parsable", f"--comment={self._comment(tag)}"]
        dependency = slurm_dependency(_held_waits(spec, waits))
        if dependency:
            # Given on the command line so the script itself stays byte-identical and can be resubmitted by hand.
            argv.append(f"--dependency={','.join(dependency)}")
        argv.append(str(script))
        attempts, output = len(self.retry_delays) + 1, ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.retry_delays[attempt - 1])
                adopted = self._adopt(tag, argv, spec, output)
                if adopted:
                    return adopted
            self.unsettled.add(tag)  # until sbatch says how it went
            returncode, stdout, output = self._run_sbatch(argv, spec, tag)
            if returncode == 0:
                job_id = _parsed_job_id(stdout)
                if job_id:
                    return self._queued(tag, job_id, argv, spec)
                adopted = self._adopt(tag, argv, spec, output)
                if adopted:
                    return adopted
                raise SubmissionError(
                    f"sbatch printed no job id for {script}: {output!r}, and squeue lists no job tagged {tag}"
                )
            if returncode is not None and not TRANSIENT_SBATCH_ERRORS.search(output):
                self.unsettled.discard(tag)  # the controller refused the job: nothing was queued
                raise SubmissionError(f"sbatch failed for stage {spec.stage!r} ({script}): {output}")
            if attempt + 1 < attempts:
                print(f"sbatch failed ({output}); retrying in {self.retry_delays[attempt]:.0f} s", file=sys.stderr)
        adopted = self._adopt(tag, argv, spec, output)
        if adopted:
            return adopted
        raise SubmissionError(f"sbatch failed for stage {spec.stage!r} ({script}) {attempts} times: {output}")

    def _comment(self, tag: str) -> str:
        # On the command line, --comment replaces the script's #SBATCH --comment: keep a user's own comment in front.
        own = self.context.cluster.get("comment")
        return f"{own} {tag}" if own not in (None, "") else tag

    def _run_sbatch(self, argv: list[str], spec: JobSpec, tag: str) -> tuple[int | None, str, str]:
        """(exit code or None when sbatch did not answer in time, stdout, stdout and stderr)."""
        import subprocess

        # Its own session: a Ctrl-C meant for the launcher does not kill sbatch halfway through talking to the
        # controller; the launcher decides (below) what to do with a job sbatch is queueing.
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(spec.directory),
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=self.sbatch_timeout_s)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            return None, "", f"sbatch gave no answer within {self.sbatch_timeout_s:.0f} s"
        except BaseException:
            self._finish_interrupted(process, argv, spec, tag)
            raise
        return process.returncode, stdout, (stdout + stderr).strip()

    def _finish_interrupted(self, process, argv: list[str], spec: JobSpec, tag: str) -> None:
        """Interrupted (Ctrl-C, SIGTERM) while sbatch runs: let it finish so that the job it may be queueing
        has a known id the rollback cancels. One that does not finish in time stays unsettled: the rollback
        looks its tag up."""
        import subprocess

        from ..interrupts import signals_deferred

        with signals_deferred("waiting for sbatch to finish, then cancelling what this command submitted"):
            try:
                stdout, _ = process.communicate(timeout=self.finish_grace_s)
            except subprocess.TimeoutExpired:
                _kill_session(process)
                return
            job_id = _parsed_job_id(stdout) if process.returncode == 0 else None
            if job_id:
                self.queued[tag] = job_id
                self.unsettled.discard(tag)

    def _queued(self, tag: str, job_id: str, argv: list[str], spec: JobSpec, note: str = "") -> str:
        # Remembered before anything else can fail (launcher.log on a full disk): the rollback cancels it.
        self.queued[tag] = job_id
        self.unsettled.discard(tag)
        append_text(spec.directory / "launcher.log", f"{join(argv)}\nSubmitted batch job {job_id}{note}\n")
        return job_id

    def _adopt(self, tag: str, argv: list[str], spec: JobSpec, output: str) -> str | None:
        """The id of the job queued under `tag` despite what sbatch said, or None when none is (one squeue)."""
        found = self.look_up([tag])
        job_id = found.get(tag)
        if job_id is None:
            return None
        print(
            f"sbatch reported a failure ({output}), but it did queue job {job_id} ({tag}); keeping that job "
            "instead of submitting a second copy",
            file=sys.stderr,
        )
        return self._queued(tag, job_id, argv, spec, f" (adopted: sbatch said {output!r})")

    def look_up(self, tags: Sequence[str]) -> dict[str, str]:
        """tag -> job id of this user's jobs carrying one of `tags`, with ONE squeue call (ended jobs the
        controller still remembers included). Tags found or confirmed absent are settled; when squeue fails
        they stay unsettled and SubmissionError says so: submitting again could queue a second copy."""
        import subprocess

        argv = ["squeue", "--me", "--noheader", "--states=all", "--format=%F|%k"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=self.sbatch_timeout_s)
            problem = (
                ""
                if result.returncode == 0
                else (result.stderr or result.stdout).strip() or f"exit {result.returncode}"
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            result, problem = None, str(error)
        if problem:
            raise SubmissionError(
                f"cannot tell whether sbatch queued the job tagged {', '.join(tags)} (squeue failed: "
                f"{problem}), so it is not submitted again"
            )
        wanted = set(tags)
        found: dict[str, str] = {}
        for line in result.stdout.splitlines():
            job_id, _, comment = line.strip().partition("|")
            tag = comment.rsplit(" ", 1)[-1]
            if tag in wanted and job_id.isdigit():
                found.setdefault(tag, job_id)
        for tag in wanted:
            self.unsettled.discard(tag)
            if tag in found:
                self.queued[tag] = found[tag]
        return found

    def settle(self) -> str | None:
        """Before a rollback: looks up the tags whose sbatch call ended without saying whether it queued its job,
        so that `queued` holds every job this command queued. Returns why that failed, or None."""
        if not self.unsettled:
            return None
        try:
            self.look_up(sorted(self.unsettled))
        except SubmissionError as error:
            return str(error)
        return None

    def live_jobs_in(self, directories: Sequence[Path]) -> list:
        from ..slurm_tags import in_directories, tagged_jobs

        return in_directories(tagged_jobs(), directories)

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            import subprocess

            try:
                result = subprocess.run(
                    ["scancel", *job_ids], capture_output=True, text=True, timeout=self.sbatch_timeout_s
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                raise SubmissionError(f"scancel {' '.join(job_ids)} failed: {error}") from None
            if result.returncode != 0:
                raise SubmissionError(f"scancel {' '.join(job_ids)} failed: {(result.stderr or result.stdout).strip()}")


# The sbatch options a `hetjob` component does not take over from the first one (and the ones it must restate).
_PER_COMPONENT = frozenset(
    {
        "nodes",
        "ntasks-per-node",
        "cpus-per-task",
        "time",
        "partition",
        "account",
        "exclusive",
        "overcommit",
        "mem",
        "gpus-per-node",
        "gpus-per-task",
        "signal",
    }
)


def _held_waits(spec: JobSpec, waits: Sequence[Wait]) -> list[Wait]:
    """The waits Slurm is given. A heterogeneous job never waits as a singleton: its components are jobs of one name,
    and Slurm (22.05) holds each of them until the others have ended, so it would never start. The launcher's own
    live-run guard keeps a second run out of the job's folder instead (submissions.py guard_live_runs)."""
    if not spec.groups:
        return list(waits)
    return [wait for wait in waits if wait.kind is not Dependency.SINGLETON]


def _option_lines(parameters: dict[str, object]) -> list[str]:
    """`--key=value` (or a bare `--flag`) per parameter, sorted, each value quoted for an #SBATCH line."""
    return [
        f"--{key}" if value is True else f"--{key}={sbatch_word(value)}" for key, value in sorted(parameters.items())
    ]


def _kill_session(process) -> None:
    """Kills sbatch and anything it started (a site's wrapper script), which would otherwise hold its output open."""
    import signal

    with contextlib.suppress(ProcessLookupError):  # sbatch and its children have ended already
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def _parsed_job_id(stdout: str) -> str | None:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`."""
    job_id = stdout.strip().split(";")[0]
    return job_id if job_id.isdigit() else None


def _srun_has_pyxis() -> bool:
    import subprocess

    result = subprocess.run(["srun", "--help"], capture_output=True, text=True)
    return "--container-image" in result.stdout + result.stderr
