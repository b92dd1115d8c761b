"""The contract every backend passes: one test class, one small subclass module per backend.

    python3 -m pytest -q tests/launch/test_backend_contract_slurm.py    # (also _bcp, _interactive)

A backend subclasses `BackendContract` in tests/launch/test_backend_contract_<name>.py and fills in its hooks:

    cluster_type          its row in launch/backends/__init__.py
    runs_here             True: submit() runs the job on this machine (bash); False: it queues the job
    tools(tmp)            PATH entries that stand in for what the script calls (srun, bcprun, ...) and the
                          environment the script runs in; the job program is always the probe `python3`
    scheduler(tmp, monkeypatch)  (queueing backends) a fake scheduler behind the submit seam; returns two readers:
                          the argv of each submission, and the ids of each cancel call
    waits_given(argv)     (queueing backends) the dependencies one submission carried, as job spec `Wait`s
    time_limit_of(text)   the time limit the script asks for, or None where the backend enforces none
    array_of(text, argv)  (items, parallelism limit) the backend will run, or None where it deals items otherwise

Checks: rendering is pure and byte-stable; every rendered script passes `bash -n`; hostile values (spaces,
quotes, $( ), backticks, newlines) in env, args and paths reach the job program unchanged and run nothing; every
dependency kind is either carried to the scheduler or refused by validate() with a one-line ConfigError (a
backend that runs jobs here may accept only the kinds that running in order and stopping at the first failure
honours); arrays keep their items and parallelism limit; time limits keep their duration; submit and cancel go
through the fake scheduler (or run here, with the exit status of a failed job as a field of the error).
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from nemo_launcher.launch.backends import backend_class
from nemo_launcher.launch.context import LaunchContext
from nemo_launcher.launch.errors import ConfigError, StageFailed
from nemo_launcher.launch.job_spec import Command, Dependency, JobSpec, Wait
from nemo_launcher.launch.pipeline import Plan, PlannedJob, submit_plan, write_plan

# Values that would run something or split into several words if a backend forgot to quote them.
HOSTILE = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$(touch CANARY)",
    "`touch CANARY`",
    "; touch CANARY #",
    "line\nbreak",
    "$HOME and ${PATH}",
    "back\\slash",
    "*",
    "é✓ 100%",
]
# A job directory with quotes, spaces, $( ), backticks and a percent sign (every backend accepts it).
# The interpreter running the tests: stand-ins are Python scripts, and the interactive backend's submit() is pointed
# at the probe through sys.executable.
REAL_PYTHON = sys.executable
HOSTILE_DIRECTORY = 'd i\'r "q" $(touch CANARY) `touch CANARY` 50%'
# Kinds that running jobs here, one after another and stopping at the first failure, honours.
RUN_IN_ORDER_KINDS = {Dependency.AFTER_SUCCESS, Dependency.AFTER_CORRESPONDING_ITEM, Dependency.SINGLETON}

PROBE = """#!{python}
import json, os, sys
with open(os.environ["PROBE_OUT"], "a") as out:
    out.write(json.dumps({{"argv": sys.argv[1:], "env": os.environ.get("HOSTILE")}}) + "\\n")
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


def write_tool(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def context_for(cluster_type: str, tmp: Path, env: tuple[tuple[str, str], ...] = ()) -> LaunchContext:
    return LaunchContext(
        cluster_type=cluster_type,
        launcher_scripts_path=Path("/opt/launcher"),
        data_dir=Path("/data"),
        base_results_dir=tmp / "results",
        container=None,
        mounts=(),
        env=env,
        cluster={"gpus_per_node": 8},
        secret_files=(),
        preflight=False,
        check_inputs=False,
        debug=False,
    )


def spec_for(tmp: Path, name: str = "job", **fields) -> JobSpec:
    defaults = dict(
        stage="training",
        name=name,
        directory=tmp / "results" / name,
        time_limit=timedelta(hours=1),
        commands=(Command("pkg.program", ("--config", "c.yaml")),),
        uses_gpus=False,
    )
    defaults.update(fields)
    return JobSpec(**defaults)


class BackendContract:
    # ---- hooks: what a backend's subclass fills in ----
    cluster_type: str = ""
    runs_here: bool = True

    def tools(self, tmp: Path) -> dict[str, str]:
        """Extra environment for running a rendered script here (PATH with stand-ins first)."""
        return {}

    def scheduler(self, tmp: Path, monkeypatch) -> tuple[Callable[[], list[list[str]]], Callable[[], list[list[str]]]]:
        raise NotImplementedError("a queueing backend provides a fake scheduler")

    def waits_given(self, argv: list[str]) -> tuple[Wait, ...]:
        raise NotImplementedError("a queueing backend reads its submission's dependencies back")

    def time_limit_of(self, text: str) -> timedelta | None:
        return None

    def array_of(self, text: str, argv: list[str] | None) -> tuple[tuple[int, ...], int | None] | None:
        return None

    # ---- helpers ----
    def backend(self, tmp: Path, env: tuple[tuple[str, str], ...] = ()):
        return backend_class(self.cluster_type)(context_for(self.cluster_type, tmp, env))

    def environment(self, tmp: Path, **extra: str) -> dict[str, str]:
        bin_dir = tmp / "probe_bin"
        probe = write_tool(bin_dir, "python3", PROBE.format(python=REAL_PYTHON))
        environment = dict(os.environ, NEMO_LAUNCHER_PYTHON=str(probe), PROBE_OUT=str(tmp / "probe.jsonl"), **extra)
        environment.update(self.tools(tmp))
        environment["PATH"] = f"{bin_dir}:{environment.get('PATH', os.environ['PATH'])}"
        return environment

    def run_script(self, backend, spec: JobSpec, tmp: Path, **extra: str) -> list[dict]:
        """Renders, writes and runs the script with bash as the backend's job would; what the probe recorded."""
        path = backend.script_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(backend.render(spec))
        subprocess.run(
            ["bash", str(path)],
            cwd=tmp,
            env=self.environment(tmp, **extra),
            check=True,
            capture_output=True,
            timeout=60,
        )
        out = tmp / "probe.jsonl"
        return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []

    def plan(self, backend, specs: list[JobSpec]) -> Plan:
        """One stage of these jobs (BCP runs one stage per call)."""
        jobs = [PlannedJob(spec, backend.script_path(spec), backend.render(spec)) for spec in specs]
        return Plan(backend.context, backend, [jobs])

    def run_here_with(self, monkeypatch, tmp: Path, **extra: str) -> None:
        """Points submit() of a backend that runs jobs here at the stand-ins and the probe."""
        for name, value in self.environment(tmp, **extra).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "executable", os.environ["NEMO_LAUNCHER_PYTHON"])

    # ---- the contract ----
    def test_rendering_is_pure_and_byte_stable(self, tmp_path):
        backend = self.backend(tmp_path, env=(("A", "1"), ("B", "two words")))
        spec = spec_for(tmp_path, waits=(Wait(Dependency.SINGLETON),), env=(("C", "3"),))
        first = backend.render(spec)
        again = self.backend(tmp_path, env=(("A", "1"), ("B", "two words"))).render(
            spec_for(tmp_path, waits=(Wait(Dependency.SINGLETON),), env=(("C", "3"),))
        )
        assert first == again == backend.render(spec)
        assert not (tmp_path / "results").exists(), "render() must not write anything"

    @pytest.mark.parametrize("shape", ["plain", "array", "several_commands", "one_task", "resumable", "waits"])
    def test_every_rendered_script_passes_bash_n(self, shape, tmp_path):
        fields = {
            "plain": {},
            "array": dict(array_items=(0, 1, 2, 7), array_limit=2, array_nodes=2, array_tasks_per_node=4),
            "several_commands": dict(commands=(Command("a.prep", ("x",), distributed=False), Command("a.run", ("y",)))),
            "one_task": dict(commands=(Command("a.once", (), distributed=False),), tasks_per_node=1),
            "resumable": dict(checkpoint_signal=True, requeue_marker=tmp_path / "results" / "job" / "resume"),
            "waits": dict(waits=(Wait(Dependency.SINGLETON),)),
        }[shape]
        backend = self.backend(tmp_path)
        spec = spec_for(tmp_path, **fields)
        script = tmp_path / "script.sh"
        script.write_text(backend.render(spec))
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr

    @pytest.mark.parametrize("value", HOSTILE)
    def test_hostile_values_arrive_unchanged_and_run_nothing(self, value, tmp_path):
        backend = self.backend(tmp_path, env=(("HOSTILE", value),))
        spec = spec_for(
            tmp_path,
            directory=tmp_path / "results" / HOSTILE_DIRECTORY,
            commands=(Command("pkg.program", ("--value", value, value)),),
        )
        backend.validate([[spec]])
        records = self.run_script(backend, spec, tmp_path)
        assert records, "the job program did not run"
        for record in records:
            assert record["argv"][-4:] == ["pkg.program", "--value", value, value]
            assert record["env"] == value
        assert not list(tmp_path.rglob("CANARY")) and not Path("CANARY").exists()

    @pytest.mark.parametrize("kind", list(Dependency), ids=lambda kind: kind.value)
    def test_every_dependency_kind_is_carried_or_refused(self, kind, tmp_path, monkeypatch):
        backend = self.backend(tmp_path)
        first = spec_for(tmp_path, "first")
        # The kind as the way the second job waits for the first, and as a wait on an outside job.
        chained = (
            None
            if kind in (Dependency.SINGLETON, Dependency.AFTER_START)
            else spec_for(tmp_path, "second", after_previous=kind)
        )
        outside_wait = Wait(kind) if kind is Dependency.SINGLETON else Wait(kind, ("4242",))
        outside = spec_for(tmp_path, "third", waits=(outside_wait,))
        for second in filter(None, (chained, outside)):
            try:
                backend.validate([[first, second]])
            except ConfigError as error:
                assert "\n" not in str(error) and f"{second.stage}.run.dependency" in str(error)
                continue
            if self.runs_here:
                # Accepted by a backend that runs jobs in order and stops at the first failure: only right for
                # the kinds that order honours, and the second job must not run when the first failed.
                assert second.after_previous in RUN_IN_ORDER_KINDS and all(
                    wait.kind in RUN_IN_ORDER_KINDS and not wait.job_ids for wait in second.waits
                ), second
                monkeypatch.chdir(tmp_path)
                self.run_here_with(monkeypatch, tmp_path, PROBE_EXIT="3")
                plan = self.plan(backend, [first, second])
                write_plan(plan, ["main.py"])
                with pytest.raises(StageFailed):
                    submit_plan(plan)
                ran = (tmp_path / "probe.jsonl").read_text().splitlines()
                assert len(ran) == len(first.commands), ran  # the probe ran once per command of the first job
                (tmp_path / "probe.jsonl").unlink()
            else:
                submissions, _ = self.scheduler(tmp_path, monkeypatch)
                backend.script_path(second).parent.mkdir(parents=True, exist_ok=True)
                backend.script_path(second).write_text(backend.render(second))
                expected = ((Wait(second.after_previous, ("1234",)),) if second is chained else ()) + second.waits
                backend.submit(backend.script_path(second), second, expected)
                assert self.waits_given(submissions()[-1]) == expected

    def test_arrays_keep_their_items_and_parallelism_limit(self, tmp_path, monkeypatch):
        backend = self.backend(tmp_path)
        spec = spec_for(tmp_path, array_items=(0, 2, 3, 5, 11), array_limit=2, array_nodes=2, array_tasks_per_node=3)
        text = backend.render(spec)
        argv = None
        if not self.runs_here:
            submissions, _ = self.scheduler(tmp_path, monkeypatch)
            backend.script_path(spec).parent.mkdir(parents=True, exist_ok=True)
            backend.script_path(spec).write_text(text)
            backend.submit(backend.script_path(spec), spec, ())
            argv = submissions()[-1]
        rendered = self.array_of(text, argv)
        if rendered is not None:
            assert rendered == ((0, 2, 3, 5, 11), 2)
        assert backend.array_words(spec) and backend.array_words(spec_for(tmp_path)) is None

    @pytest.mark.parametrize(
        "limit", [timedelta(minutes=15), timedelta(hours=4), timedelta(days=1, hours=4, seconds=5)], ids=str
    )
    def test_time_limits_keep_their_duration(self, limit, tmp_path):
        backend = self.backend(tmp_path)
        spec = spec_for(tmp_path, time_limit=limit)
        rendered = self.time_limit_of(backend.render(spec))
        assert rendered in (None, limit)
        assert (rendered is None) == self.runs_here, "a queue enforces the time limit; a backend running here cannot"
        assert backend.time_words(spec) and " " not in backend.time_words(spec)

    def test_submit_and_cancel(self, tmp_path, monkeypatch):
        backend = self.backend(tmp_path)
        spec = spec_for(tmp_path)
        path = backend.script_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(backend.render(spec))
        if self.runs_here:
            self.run_here_with(monkeypatch, tmp_path)
            assert backend.submit(path, spec, ()) is None
            assert len((tmp_path / "probe.jsonl").read_text().splitlines()) == 1
            self.run_here_with(monkeypatch, tmp_path, PROBE_EXIT="3")
            with pytest.raises(StageFailed) as failure:
                backend.submit(path, spec, ())
            assert failure.value.exit_status == 3 and failure.value.exit_code == 4
            backend.cancel([])  # nothing is queued: nothing to cancel, and no error
        else:
            submissions, cancels = self.scheduler(tmp_path, monkeypatch)
            job_id = backend.submit(path, spec, ())
            assert job_id and job_id in backend.queued.values()
            assert submissions()[-1][-1] == str(path)
            backend.cancel([job_id])
            assert cancels()[-1] == [job_id]
