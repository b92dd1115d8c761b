"""CI's parallel run (tests/conftest.py, .ci/run: pytest-xdist with --dist loadgroup): which tests share a worker.

    python3 -m pytest -q tests/test_ci_units.py

A child session on two workers runs small modules that log where and in what order their tests ran: a module is
one unit, every module on the (stand-in) Slurm shares one unit that is queued first, the modules using a shared
session fixture share a unit that builds it once, and the strict skip list still matches the node ids xdist
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
        f"test_plain_{name}.py": """
        import pytest
        from units_log import log

        @pytest.mark.parametrize("n", range(4))
        def test_one_of_many(request, n):
            log(request)
        """
        for name in "abcd"
    },
}


def _child_session(tmp_path):
    require_module("xdist")
    conftest = CONFTEST.read_text()
    assert "\nALLOWED_SKIPS = {}\n" in conftest, "the allow list moved; update this test"
    allowed = '{"test_shared_a.py::test_allowed_skip": "shows that a unit-suffixed node id still matches"}'
    (tmp_path / "conftest.py").write_text(
        conftest.replace("\nALLOWED_SKIPS = {}\n", f"\nALLOWED_SKIPS = {allowed}\n") + CHILD_CONFTEST_EXTRA
    )
    (tmp_path / "units_log.py").write_text(LOGGER)
    for name, text in MODULES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    log = tmp_path / "units.jsonl"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "UNITS_LOG": str(log),
        "PYTHONPATH": f"{tmp_path}:{CONFTEST.parent.parent}",
        "NEMO_LAUNCHER_TEST_STRICT": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "--no-loadscope-reorder",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_modules_slurm_and_shared_fixtures_make_the_units(tmp_path):
    logged = _child_session(tmp_path)
    ran = [entry for entry in logged if "built" not in entry]
    workers = {}  # module -> workers its tests ran on
    for entry in ran:
        workers.setdefault(entry["node"].split("::")[0], set()).add(entry["worker"])
    assert len(workers) == 8 and all(len(names) == 1 for names in workers.values()), workers

    slurm = [entry for entry in ran if entry["node"].startswith("test_slurm_")]
    assert len(slurm) == 5 and all(entry["node"].endswith("@slurm") for entry in slurm), slurm
    (worker,) = {entry["worker"] for entry in slurm}
    on_that_worker = [entry["node"] for entry in ran if entry["worker"] == worker]
    assert on_that_worker[:5] == [entry["node"] for entry in slurm], "the Slurm unit is not the first one there"

    assert workers["test_shared_a.py"] == workers["test_shared_b.py"]
    built = [entry for entry in logged if "built" in entry]  # once, for both modules
    assert [(entry["built"], {entry["worker"]}) for entry in built] == [("tiny_pipeline", workers["test_shared_a.py"])]
    plain = [entry["node"] for entry in ran if entry["node"].startswith("test_plain_")]
    assert len(plain) == 16 and not any("@" in node for node in plain)  # plain modules keep their node ids
