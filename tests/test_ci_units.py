"""CI's parallel run (tests/conftest.py, .ci/run: pytest-xdist with --dist loadgroup): which tests share a worker.

    python3 -m pytest -q tests/test_ci_units.py

A child session on two workers runs small modules that log where and in what order their tests ran: a module is
one unit, every module on the (stand-in) Slurm shares one unit that is queued first, the modules that run jobs
(under jobs/, the quick starts) are queued next and the others after them, most tests first, the modules using a
shared session fixture share a unit that builds it once, and the strict skip list still matches the node ids xdist
suffixes with a unit name.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

from tests.conftest import require_module

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")

# Every test logs its worker and node id, in the order the worker ran it.
LOGGER = """
import json, os, pathlib

def log(request, **extra):
    with open(pathlib.Path(os.environ["UNITS_LOG"]), "a") as out:
        record = {"worker": os.environ["PYTEST_XDIST_WORKER"], "node": request.node.nodeid, **extra}
        out.write(json.dumps(record) + "\\n")
"""
CHILD_CONFTEST_EXTRA = """

@pytest.fixture(scope="session")
def slurm_cluster():
    return "stand-in"


@pytest.fixture(scope="session")
def tiny_pipeline(request):
    from units_log import log

    log(request, built="tiny_pipeline")
    return "run"
"""
MODULES = {
    "test_slurm_a.py": """
        import pytest
        from units_log import log

        @pytest.mark.parametrize("n", range(3))
        def test_submits(slurm_cluster, request, n):
            log(request)
        """,
    "test_slurm_b.py": """
        from units_log import log

        def test_plain_part_of_a_slurm_module(request):
            log(request)

        def test_submits(slurm_cluster, request):
            log(request)
        """,
    "test_held_on_slurm.py": """
        from units_log import log

        HELD_JOBS_ONLY = True

        def test_queues_held_jobs(slurm_cluster, request):
            log(request)
        """,
    "test_shared_a.py": """
        import pytest
        from units_log import log

        def test_reads(tiny_pipeline, request):
            log(request)

        def test_allowed_skip(tiny_pipeline):
            pytest.skip("listed in ALLOWED_SKIPS")
        """,
    "test_shared_b.py": """
        from units_log import log

        def test_reads(tiny_pipeline, request):
            log(request)
        """,
    **{
        f"test_plain_{name}.py": f"""
        import pytest
        from units_log import log

        @pytest.mark.parametrize("n", range({count}))
        def test_one_of_many(request, n):
            log(request)
        """
        for name, count in (("a", 2), ("b", 5), ("c", 3), ("d", 6))
    },
    "test_quickstart_x.py": """
        from units_log import log

        def test_runs_a_quick_start(request):
            log(request)
        """,
    "jobs/test_trains.py": """
        from units_log import log

        def test_trains(request):
            log(request)
        """,
}


def _child_session(tmp_path, *options):
    """Runs pytest over the modules above with CI's distribution and `options`; returns its stdout."""
    require_module("xdist")
    conftest = CONFTEST.read_text()
    assert "\nALLOWED_SKIPS = {}\n" in conftest, "the allow list moved; update this test"
    allowed = '{"test_shared_a.py::test_allowed_skip": "shows that a unit-suffixed node id still matches"}'
    (tmp_path / "conftest.py").write_text(
        conftest.replace("\nALLOWED_SKIPS = {}\n", f"\nALLOWED_SKIPS = {allowed}\n") + CHILD_CONFTEST_EXTRA
    )
    (tmp_path / "units_log.py").write_text(LOGGER)
    for name, text in MODULES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "UNITS_LOG": str(tmp_path / "units.jsonl"),
        "PYTHONPATH": f"{tmp_path}:{CONFTEST.parent.parent}",
        "NEMO_LAUNCHER_TEST_STRICT": "1",
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dist", "loadgroup"]
        + ["--no-loadscope-reorder", *options, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def _logged(tmp_path, workers="2"):
    _child_session(tmp_path, "-n", workers)
    return [json.loads(line) for line in (tmp_path / "units.jsonl").read_text().splitlines()]


def test_modules_slurm_and_shared_fixtures_make_the_units(tmp_path):
    logged = _logged(tmp_path)
    ran = [entry for entry in logged if "built" not in entry]
    workers = {}  # module -> workers its tests ran on
    for entry in ran:
        workers.setdefault(entry["node"].split("::")[0], set()).add(entry["worker"])
    assert len(workers) == 11 and all(len(names) == 1 for names in workers.values()), workers

    slurm = [entry for entry in ran if entry["node"].startswith("test_slurm_")]
    assert len(slurm) == 5 and all(entry["node"].endswith("@slurm") for entry in slurm), slurm
    (worker,) = {entry["worker"] for entry in slurm}
    on_that_worker = [entry["node"] for entry in ran if entry["worker"] == worker]
    assert on_that_worker[:5] == [entry["node"] for entry in slurm], "the Slurm unit is not the first one there"

    (held,) = [entry["node"] for entry in ran if entry["node"].startswith("test_held_on_slurm.py")]
    assert "@" not in held  # a module of held jobs only is a unit of its own, beside the Slurm unit

    assert workers["test_shared_a.py"] == workers["test_shared_b.py"]
    built = [entry for entry in logged if "built" in entry]  # once, for both modules
    assert [(entry["built"], {entry["worker"]}) for entry in built] == [("tiny_pipeline", workers["test_shared_a.py"])]
    plain = [entry["node"] for entry in ran if entry["node"].startswith("test_plain_")]
    assert len(plain) == 16 and not any("@" in node for node in plain)  # plain modules keep their node ids


def test_units_are_queued_slurm_first_then_the_job_modules_then_the_most_tests_first(tmp_path):
    ran = _logged(tmp_path, workers="1")  # one worker runs the units in the order xdist hands them out
    modules = list(dict.fromkeys(entry["node"].split("::")[0] for entry in ran if "built" not in entry))
    assert modules == [
        "test_slurm_a.py",
        "test_slurm_b.py",
        "test_held_on_slurm.py",
        "jobs/test_trains.py",
        "test_quickstart_x.py",
        "test_plain_d.py",
        "test_plain_b.py",
        "test_plain_c.py",
        "test_plain_a.py",
        "test_shared_a.py",
        "test_shared_b.py",
    ], modules
