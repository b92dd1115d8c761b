"""Fixtures and skip rules shared by the whole test suite.

`slurm_cluster` gives tests a real Slurm to submit to: the project's local cluster
(`sudo .ci/local_slurm/start.sh`: partition `debug`, nodes fakenode1..4, 8 fake GPUs
each, fake pyxis) or any other that `sbatch` reaches. Without one, Slurm tests skip.

Strict mode (CI): `.ci/run` exports NEMO_LAUNCHER_TEST_STRICT=1 (NEMO_LAUNCHER_TEST_SLURM=required
implies it). There a test that would skip fails instead, saying what is missing and how CI provides it:
use `require_module` instead of pytest's import-or-skip helper and `skip_or_fail` instead of `pytest.skip`. A skip
that still happens under strict mode (a new `pytest.skip`, a `skipif` marker) fails the session, unless
ALLOWED_SKIPS lists it with its reason.
"""

import collections
import dataclasses
import importlib
import os
import shutil
import subprocess
import time

import pytest

from tests import parsed_configs

# One torch thread per process, here and in every job the tests start: CI runs more test workers than cores, each
# job a process or two, so a second thread only waits (10-25x slower steps measured on the 2-core machine); and a
# computation a test repeats in its own process then matches, bit for bit, the job's.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Thousands of in-process compositions of the launcher's configs reuse the parsed conf/ files (tests/parsed_configs.py).
parsed_configs.install()

# Long enough for a slurmctld busy with another worker's jobs on a 2-core machine.
_SLURM_QUERY_TIMEOUT_S = 20

STRICT_ENV = "NEMO_LAUNCHER_TEST_STRICT"
INSTALL_FIX = "pip install -r requirements-dev.txt (CI's .ci/run does this first)"
LOCAL_SLURM_SETUP = (
    "CI starts the project's cluster with `sudo .ci/local_slurm/start.sh`: 4 nodes, "
    "8 fake GPUs each as GPU GRES, fake pyxis"
)

# The one place where a skip is allowed under strict mode: node id (or a prefix of it) -> why it may skip.
# Empty: CI's machine has everything the suite needs, so every skip there is a bug.
ALLOWED_SKIPS = {}


def strict_ci() -> bool:
    """True where skipping is not allowed: under CI (.ci/run), or when the Slurm tests were made mandatory."""
    return os.environ.get(STRICT_ENV, "") == "1" or os.environ.get("NEMO_LAUNCHER_TEST_SLURM", "").lower() == "required"


def skip_or_fail(missing: str, setup: str) -> None:
    """Skips the test (or the module) because `missing`; under strict mode fails it instead.

    `setup` says how CI provides what is missing, so the failure tells the reader what to fix.
    """
    if strict_ci():
        pytest.fail(f"{missing}. Under {STRICT_ENV}=1 (CI) this must not skip: {setup}", pytrace=False)
    pytest.skip(f"{missing}; {setup}", allow_module_level=True)


def require_module(name: str):
    """Imports and returns module `name`; a test module calls it where it would use pytest's import-or-skip helper.

    Not importable: skips outside strict mode, fails under it. Installed but raising something other than
    ImportError while importing (a broken pin) fails everywhere: that is a broken environment, not a missing extra.
    """
    try:
        return importlib.import_module(name)
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name == name:
            missing = f"`{name}` is not installed"
        else:
            missing = f"`{name}` is installed but does not import ({type(error).__name__}: {error})"
        skip_or_fail(missing, INSTALL_FIX)
    except Exception as error:  # noqa: BLE001  (anything else a broken package raises at import)
        pytest.fail(
            f"`{name}` is installed but does not import ({type(error).__name__}: {error}); fix: {INSTALL_FIX}",
            pytrace=False,
        )


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    """What the running cluster offers, as read from `sinfo` when the session starts."""

    version: str  # e.g. "22.05.8"
    partition: str  # the default partition (marked `*` by sinfo)
    nodes: tuple  # node names in that partition, e.g. ("fakenode1", "fakenode2")
    gpus_per_node: int  # gres/gpu count of a node; 0 when no GPU GRES is configured
    has_pyxis: bool  # `srun --help` lists --container-image (real or fake pyxis)

    def job_state(self, job_id: str) -> str:
        """State of a job as `scontrol` reports it (PENDING, RUNNING, COMPLETED, FAILED, ...)."""
        out = _run(["scontrol", "show", "job", "-o", str(job_id)])
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        raise AssertionError(f"no JobState in scontrol output for job {job_id}: {out!r}")

    def wait(self, job_id: str, timeout_s: float = 60.0) -> str:
        """Wait until a job has ended and return its final state; fail the test on timeout."""
        ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.job_state(job_id)
            if state in ended:
                return state
            if time.monotonic() > deadline:
                # A hung job would hold its nodes and starve every Slurm test after this one (its dependants go
                # with it: the launcher submits them with --kill-on-invalid-dep).
                shown = subprocess.run(
                    ["scontrol", "show", "job", "-o", str(job_id)],
                    capture_output=True,
                    text=True,
                    timeout=_SLURM_QUERY_TIMEOUT_S,
                ).stdout  # no check: the job may be gone by now
                stderr = [word for word in shown.split() if word.startswith("StdErr=")]
                subprocess.run(["scancel", str(job_id)], check=False, timeout=_SLURM_QUERY_TIMEOUT_S)
                pytest.fail(
                    f"Slurm job {job_id} still {state} after {timeout_s:.0f}s; cancelled it "
                    f"({stderr[0] if stderr else 'no StdErr in scontrol'})"
                )
            time.sleep(0.2)


def _run(argv) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=_SLURM_QUERY_TIMEOUT_S).stdout


def _probe_slurm() -> SlurmCluster:
    """Raises with the reason when no usable Slurm answers."""
    for tool in ("sbatch", "squeue", "sinfo", "srun", "scontrol"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"`{tool}` is not on PATH")
    _run(["squeue", "-h", "-o", "%i"])  # fails when slurmctld does not answer
    version = _run(["sinfo", "--version"]).split()[-1]
    partitions = _run(["sinfo", "-h", "-o", "%P"]).split()
    default = next((p for p in partitions if p.endswith("*")), partitions[0] if partitions else None)
    if default is None:
        raise RuntimeError("sinfo lists no partition")
    partition = default.rstrip("*")
    nodes = tuple(_run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"]).split())
    gpus = 0
    for gres in _run(["sinfo", "-h", "-p", partition, "-o", "%G"]).split():
        for item in gres.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu" and fields[-1].isdigit():
                gpus = max(gpus, int(fields[-1]))
    has_pyxis = "--container-image" in _run(["srun", "--help"])
    return SlurmCluster(version, partition, nodes, gpus, has_pyxis)


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        cluster = _probe_slurm()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        reason = f"no usable Slurm cluster: {error}"
        if isinstance(error, subprocess.CalledProcessError):
            reason += f" ({(error.stderr or '').strip()})"
        if os.environ.get("NEMO_LAUNCHER_TEST_SLURM", "").lower() == "required":
            pytest.fail(
                f"{reason}. NEMO_LAUNCHER_TEST_SLURM=required; start the local cluster with "
                "`sudo .ci/local_slurm/start.sh` (or unset the variable to skip the Slurm tests).",
                pytrace=False,
            )
        skip_or_fail(reason, LOCAL_SLURM_SETUP)
    yield cluster


def require_project_cluster(cluster: SlurmCluster, nodes: int = 2, gpus_per_node: int = 0, pyxis: bool = False) -> None:
    """Skips (fails under strict mode) a test that needs more than `cluster` offers."""
    if len(cluster.nodes) < nodes or cluster.gpus_per_node < gpus_per_node or (pyxis and not cluster.has_pyxis):
        needs = f"{nodes} nodes" + (f", {gpus_per_node} GPUs per node as GRES" if gpus_per_node else "")
        needs += ", pyxis" if pyxis else ""
        skip_or_fail(f"needs {needs}; the cluster here has {cluster}", LOCAL_SLURM_SETUP)


# ---- strict mode: no skip goes unnoticed --------------------------------------------------------------


def _allowed(nodeid: str) -> bool:
    if nodeid.rfind(_UNIT_MARK) > nodeid.rfind("]"):  # CI's parallel run: the node id ends with its shared unit
        nodeid = nodeid.rsplit(_UNIT_MARK, 1)[0]
    return any(nodeid == allowed or nodeid.startswith((allowed + "::", allowed + "[")) for allowed in ALLOWED_SKIPS)


def _skip_reason(report) -> str:
    if isinstance(report.longrepr, tuple):  # (file, line, "Skipped: reason")
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


class _StrictSkips:
    """Under strict mode: records every skip (test or whole module), lists them and fails the session."""

    def __init__(self):
        self.skipped = []  # (node id, reason)

    def _record(self, report):
        # xfail outcomes also arrive as "skipped" reports; they carry `wasxfail` and are not skips.
        if report.skipped and not hasattr(report, "wasxfail") and not _allowed(report.nodeid):
            self.skipped.append((report.nodeid or "<collection>", _skip_reason(report)))

    def pytest_runtest_logreport(self, report):
        self._record(report)

    def pytest_collectreport(self, report):
        self._record(report)

    def pytest_sessionfinish(self, session):
        if self.skipped and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.skipped:
            return
        terminalreporter.section(
            f"{len(self.skipped)} skipped under {STRICT_ENV}=1 (CI), which fails the run", red=True
        )
        for nodeid, reason in self.skipped:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}")
        terminalreporter.line(
            "Make each one run here, or list it with its reason in ALLOWED_SKIPS (tests/conftest.py)."
        )


def pytest_configure(config):
    if strict_ci():
        config.pluginmanager.register(_StrictSkips(), "nemo_launcher_strict_skips")
    for line in _known_noise_filters():
        config.addinivalue_line("filterwarnings", line)


def _known_noise_filters():
    """The warnings job programs hide (jobs/common/quiet.py, one list for both), as pytest filters: tests that run
    megatron-core, Lightning or torch in their own process would otherwise end with a page of them."""
    import re

    from nemo_launcher.jobs.common.quiet import NOISY_WARNING_PATTERNS, NOISY_WARNINGS

    entries = [(entry.category, re.escape(entry.message), entry.package) for entry in NOISY_WARNINGS]
    entries += list(NOISY_WARNING_PATTERNS)
    # A ':' would end the message field of a filter line; no entry has one, and one that did would be left out.
    return [
        f"ignore:{message}:{category.__name__}:{re.escape(package)}(\\.|$)"
        for category, message, package in entries
        if ":" not in message
    ]


# ---- CI's parallel run: pytest-xdist with --dist loadgroup ---------------------------------------------------------
# `-n auto` spreads the suite over two workers more than cores (the Slurm tests spend much of their time waiting on the
# scheduler). xdist hands a worker one work unit at a time; here a unit is a whole module, so its module fixtures
# are built once, and modules share a unit when running them on different workers would cost or break something:
# - every module with a test on the real Slurm (fixture `slurm_cluster`): the local cluster has two nodes that
#   several tests take whole (exclusive jobs, faults), so those tests run one after another, as in a serial run.
#   A module that sets HELD_JOBS_ONLY = True queues only jobs held back from ever starting (`--begin=now+3600`):
#   it takes no node, so it runs beside that unit instead of lengthening it;
# - the modules using one of SHARED_SESSION_FIXTURES: session fixtures that train or convert a model, which each
#   worker would otherwise build again (a cheap session fixture, such as the GPT-2 files, is simply rebuilt).
# The Slurm unit is queued first: it is the longest, and the other workers fill the time it leaves a core idle
# (the held-jobs-only Slurm modules right after it). The
# modules that run jobs come next (tests/jobs/, the quick starts: a minute or more each), and the rest last, the
# modules with the most tests first: the units handed out at the end are the short ones, so the workers finish
# together instead of one running a quick start while the others wait.
SLURM_UNIT = "slurm"
JOB_MODULE_FOLDER = "jobs"
JOB_MODULE_PREFIX = "test_quickstart"
SHARED_SESSION_FIXTURES = ("tiny_pipeline",)
HELD_JOBS_ONLY = "HELD_JOBS_ONLY"  # the module attribute that says so
# Workers beyond the cores (pytest_xdist_auto_num_workers says why two).
EXTRA_WORKERS = 2
_UNIT_MARK = "@"  # what xdist puts between a node id and its xdist_group name


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _shared_units(items) -> dict:
    """Module path -> the unit it shares (SLURM_UNIT or a shared fixture's name), for the modules that share one."""
    joined = {}  # union-find over module paths and unit names; a unit name stays the root of its set

    def root(name):
        while joined.setdefault(name, name) != name:
            name = joined[name]
        return name

    for item in items:
        names = set(item.fixturenames)
        on_the_nodes = "slurm_cluster" in names and not getattr(item.module, HELD_JOBS_ONLY, False)
        links = [SLURM_UNIT] if on_the_nodes else []
        links += [fixture for fixture in SHARED_SESSION_FIXTURES if fixture in names]
        for link in links:
            first, second = root(_module(item.nodeid)), root(link)
            if first != second:
                rank = (SLURM_UNIT, *SHARED_SESSION_FIXTURES)
                keep, drop = sorted((first, second), key=lambda name: rank.index(name) if name in rank else len(rank))
                joined[drop] = keep
    return {name: root(name) for name in joined if name.endswith(".py")}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook for `-n auto` (pyproject.toml's addopts)
def pytest_xdist_auto_num_workers(config):
    """Two workers more than the cores this process may use (`nproc`): one worker runs the Slurm unit, which mostly
    waits on the scheduler and its jobs, and the others each run a job process at a time that often waits too (a
    torchrun start, a data download stand-in, a signal test's sleep), so the cores are busiest with two extra.
    Measured on a 2-core machine like CI's, one commit: 3 workers ran the suite in 1,780 s, 4 workers in 1,635 s.
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, wins (None hands the choice back to
    xdist, which reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + EXTRA_WORKERS


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    # An xdist worker sees `loadgroup` set (its own `dist` is "no"); a run without workers sees `dist`.
    if not (getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup"):
        return
    units = _shared_units(items)
    for item in items:
        if _module(item.nodeid) in units:
            item.add_marker(pytest.mark.xdist_group(units[_module(item.nodeid)]))
    tests_in = collections.Counter(_module(item.nodeid) for item in items)

    def queue_position(item):
        module = _module(item.nodeid)
        if units.get(module) == SLURM_UNIT:
            return (0, 0)
        if "slurm_cluster" in item.fixturenames:  # held jobs only: long waits on the scheduler, so early too
            return (0, 1)
        *folders, name = module.split("/")
        if JOB_MODULE_FOLDER in folders or name.startswith(JOB_MODULE_PREFIX):
            return (1, 0)
        return (2, -tests_in[module])

    items.sort(key=queue_position)  # stable: a module's tests stay together and in order


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without the plugin it is never called
def pytest_xdist_make_scheduler(config, log):
    """Under --dist loadgroup: a module whose tests carry no xdist_group is one unit (plain loadgroup would hand out
    its tests one by one, building its module fixtures on every worker)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleUnits(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return _module(nodeid) if scope == nodeid else scope

    return ModuleUnits(config, log)
