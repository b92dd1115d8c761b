"""csp_tools: cluster validation on the local 2-node Slurm with stand-in `dcgmi` and `all_reduce_perf`.

    sudo .ci/local_slurm/start.sh && python3 -m pytest -q tests/csp_tools

The stand-ins fail on the node named in CV_TEST_BAD_NODE (read through SLURMD_NODENAME),
so the tests check that the report names exactly the node that was made to fail.
"""

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import require_project_cluster, skip_or_fail

REPO = Path(__file__).resolve().parents[2]
CSP_TOOLS = REPO / "csp_tools"
CLOUDS = ("aws", "azure", "oci")
JOB_SCRIPTS = ("cluster_validation.sh", "dcgmi_diag.sh", "nccl.sh", "build-nccl-tests.sh")

# `dcgmi diag` prints a table; the bad node gets a failing row and a non-zero exit, as DCGM 3 does.
FAKE_DCGMI = r"""#!/usr/bin/env bash
[[ $1 == diag ]] || { echo "fake dcgmi: only 'diag' is faked" >&2; exit 2; }
echo "+---------------------------+------------------------------------------------+"
echo "| Diagnostic                | Result                                         |"
echo "+===========================+================================================+"
echo "| Deployment                | Pass                                           |"
if [[ ${SLURMD_NODENAME:-} == "${CV_TEST_BAD_NODE:-}" ]]; then
  echo "| Memory Bandwidth          | Fail - GPU: 3                                  |"
  exit 226
fi
echo "| Memory Bandwidth          | Pass - All                                     |"
"""

# all_reduce_perf as nccl-tests prints it: only rank 0 writes the table. A pair holding the
# bad node measures far below any threshold, as a broken InfiniBand link would.
FAKE_ALL_REDUCE_PERF = r"""#!/usr/bin/env bash
[[ ${SLURM_PROCID:-0} == 0 ]] || exit 0
echo "$*" > "${CV_TEST_ARGS_FILE:-/dev/null}"
busbw=45.10
if scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx "${CV_TEST_BAD_NODE:-none}"; then busbw=3.20; fi
cat <<EOF
# env NCCL_TOPO_FILE=${NCCL_TOPO_FILE:-} NCCL_PROTO=${NCCL_PROTO:-} NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-}
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1  44000.0   24.40   $busbw      0  44010.0   24.39   $busbw      0
  8589934592    2147483648     float     sum      -1 352000.0   24.40   $busbw      0 352100.0   24.39   $busbw      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : $busbw
#
EOF
"""


def _shell_scripts():
    scripts = sorted(CSP_TOOLS.glob("common/*.sh")) + sorted(CSP_TOOLS.glob("*/env.sh"))
    scripts += sorted((REPO / ".ci" / "local_slurm").glob("*.sh")) + [REPO / ".ci" / "run"]
    return scripts


@pytest.fixture
def fake_bin(tmp_path):
    """A folder with the stand-ins, to put first on PATH (sbatch passes PATH on to the jobs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("dcgmi", FAKE_DCGMI), ("all_reduce_perf", FAKE_ALL_REDUCE_PERF)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _validate(args, env_extra=None, path_first=None, timeout=300):
    env = dict(os.environ)
    env.pop("CV_NCCL_TESTS_DIR", None)
    env.pop("CV_RESULTS_DIR", None)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    env.update(env_extra or {})
    return subprocess.run(
        ["bash", str(CSP_TOOLS / "aws" / "cluster_validation.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )


def _two_nodes(cluster):
    require_project_cluster(cluster, nodes=2)
    return cluster.nodes[:2]


def _required(cluster, results):
    a, b = _two_nodes(cluster)
    return [
        "--nodes=2",
        f"--nodelist={a},{b}",
        f"--partition={cluster.partition}",
        f"--results-dir={results}",
        "--max-wait=5",
        "--dcgm-level=1",
    ]


# ---- layout and static checks -------------------------------------------------------------


@pytest.mark.parametrize("cloud", CLOUDS)
def test_each_cloud_folder_holds_only_what_differs(cloud):
    folder = CSP_TOOLS / cloud
    for name in JOB_SCRIPTS:
        path = folder / name
        assert path.is_symlink(), f"{path} should link to ../common/{name}: shared logic lives once"
        assert path.resolve() == (CSP_TOOLS / "common" / name).resolve()
    own = {p.name for p in folder.iterdir() if not p.is_symlink()}
    assert own <= {"env.sh", "topo.xml"}, own


def test_scripts_pass_bash_n():
    for script in _shell_scripts():
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        skip_or_fail("shellcheck is not installed", "`.ci/run` installs it (apt-get install shellcheck)")
    result = subprocess.run(
        ["shellcheck", "-x", *[str(p.relative_to(REPO)) for p in _shell_scripts()]],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout


def test_azure_topology_is_well_formed_xml():
    import xml.etree.ElementTree as ElementTree

    root = ElementTree.parse(CSP_TOOLS / "azure" / "topo.xml").getroot()
    assert root.tag == "system"
    gpus = [p for p in root.iter("pci") if p.get("class") == "0x030200"]
    nics = [p for p in root.iter("pci") if p.get("class") == "0x020700"]
    assert len(gpus) == 8 and len(nics) == 8
    # Each NUMA node pairs two GPUs with two NICs behind one switch.
    for cpu in root.findall("cpu"):
        classes = [p.get("class") for p in cpu.iter("pci")]
        assert classes.count("0x030200") == 2 and classes.count("0x020700") == 2


# ---- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_usage(flag):
    result = _validate([flag])
    assert result.returncode == 0
    assert "Usage: bash csp_tools/aws/cluster_validation.sh --nodes=N --nodelist=LIST --partition=NAME" in result.stdout
    for option in ("--dcgm", "--nccl", "--results-dir", "--nccl-tests-dir", "--busbw-threshold"):
        assert option in result.stdout
    assert "(default for aws: 30)" in result.stdout


@pytest.mark.parametrize(
    "args, missing",
    [
        ([], "--nodes --nodelist --partition"),
        (["--nodes=2"], "--nodelist --partition"),
        (["--nodes=2", "--nodelist=n[1-2]"], "--partition"),
        (["--partition=p", "--nodelist", "n[1-2]"], "--nodes"),
    ],
)
def test_missing_required_flags_give_a_clear_error(args, missing):
    result = _validate(args)
    assert result.returncode == 2
    assert f"missing required option(s): {missing}" in result.stderr
    assert "cluster_validation.sh -h" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes=two", "--nodelist=a", "--partition=p"], "--nodes must be a positive whole number, got 'two'"),
        (["--nodes=1", "--nodelist=a", "--partition=p", "--frobnicate=1"], "unknown option '--frobnicate'"),
        (["--nodes=1", "--nodelist=a", "--partition=p", "--dcgm-level=7"], "--dcgm-level must be 1, 2, 3 or 4"),
        (
            ["--nodes=1", "--nodelist=a", "--partition=p", "--busbw-threshold=fast"],
            "--busbw-threshold must be a number",
        ),
        (["--nodes=1", "--nodelist=a", "stray"], "unexpected argument 'stray'"),
        (["--nodes"], "--nodes needs a value"),
    ],
)
def test_bad_arguments_are_rejected(args, message):
    result = _validate(args)
    assert result.returncode == 2
    assert message in result.stderr


def test_node_count_must_match_the_list(slurm_cluster, tmp_path):
    a, b = _two_nodes(slurm_cluster)
    result = _validate(
        ["--nodes=3", f"--nodelist={a},{b}", f"--partition={slurm_cluster.partition}", f"--results-dir={tmp_path}"]
    )
    assert result.returncode == 2
    assert f"--nodes=3 but --nodelist={a},{b} names 2 node(s): {a} {b}" in result.stderr


def test_unknown_partition_is_named(slurm_cluster, tmp_path):
    result = _validate(
        [
            "--nodes=1",
            f"--nodelist={slurm_cluster.nodes[0]}",
            "--partition=no_such_partition",
            f"--results-dir={tmp_path}",
        ]
    )
    assert result.returncode == 2
    assert f"partition 'no_such_partition' does not exist; sinfo lists: {slurm_cluster.partition}" in result.stderr


# ---- full runs on the local cluster --------------------------------------------------------------------


def _run_dir(results: Path) -> Path:
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return runs[0]


def test_validation_names_the_failing_node(slurm_cluster, tmp_path, fake_bin):
    good, bad = _two_nodes(slurm_cluster)
    results = tmp_path / "results"
    args_file = tmp_path / "all_reduce_perf.args"
    result = _validate(
        _required(slurm_cluster, results),
        path_first=fake_bin,
        env_extra={"CV_TEST_BAD_NODE": bad, "CV_TEST_ARGS_FILE": str(args_file)},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout

    assert re.search(rf"^  {good} +PASS", out, re.M), out
    assert re.search(rf"^  {bad} +FAIL Memory Bandwidth: Fail - GPU: 3", out, re.M), out
    assert re.search(rf"^  {good} {bad} +FAIL busbw=3.20 GB/s < 30 GB/s", out, re.M), out
    # DCGM isolates the node; with two nodes the one NCCL pair implicates both.
    failed_section = out.split("FAILED NODES", 1)[1]
    assert f"  {bad}: dcgm, nccl" in failed_section
    assert f"  {good}: nccl" in failed_section

    run_dir = _run_dir(results)
    assert (run_dir / "report.txt").read_text() in out
    assert "Fail - GPU: 3" in (run_dir / f"dcgmi-{bad}.log").read_text()
    assert "Pass - All" in (run_dir / f"dcgmi-{good}.log").read_text()
    assert args_file.read_text().split() == ["-b", "1G", "-e", "8G", "-f", "2", "-g", "1"]
    # The cloud's settings reach the NCCL job.
    nccl_log = next(run_dir.glob("nccl-*.log")).read_text()
    assert "threshold 30 GB/s" in nccl_log
    assert "NCCL_PROTO=simple" in nccl_log


def test_healthy_cluster_passes(slurm_cluster, tmp_path, fake_bin):
    results = tmp_path / "results"
    result = _validate(_required(slurm_cluster, results), path_first=fake_bin)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED: all 2 nodes passed every test." in result.stdout
    assert f"Logs and report: {_run_dir(results)}" in result.stdout


def test_dcgm_only_and_threshold_option(slurm_cluster, tmp_path, fake_bin):
    results = tmp_path / "results"
    result = _validate([*_required(slurm_cluster, results), "--dcgm"], path_first=fake_bin)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DCGM GPU diagnostics" in result.stdout and "NCCL" not in result.stdout

    result = _validate(
        [*_required(slurm_cluster, tmp_path / "r2"), "--nccl", "--busbw-threshold=50"], path_first=fake_bin
    )
    assert result.returncode == 1
    assert "DCGM" not in result.stdout
    assert "FAIL busbw=45.10 GB/s < 50 GB/s" in result.stdout


def test_missing_dcgmi_is_reported_per_node(slurm_cluster, tmp_path, fake_bin):
    (fake_bin / "dcgmi").unlink()
    if shutil.which("dcgmi"):
        skip_or_fail(
            f"a real dcgmi is installed here ({shutil.which('dcgmi')}), so it cannot be missing",
            "CI runs on a machine without DCGM, where the fake dcgmi is the only one",
        )
    result = _validate([*_required(slurm_cluster, tmp_path / "results"), "--dcgm"], path_first=fake_bin)
    assert result.returncode == 1
    assert result.stdout.count("FAIL dcgmi is not installed on this node") == 2


def test_builds_nccl_tests_first_when_missing(slurm_cluster, tmp_path, fake_bin):
    # A local stand-in for the nccl-tests repository whose `make` "builds" the fake binary,
    # so the build job and the afterok dependency of the pair job run for real.
    hidden = tmp_path / "all_reduce_perf.built"
    (fake_bin / "all_reduce_perf").rename(hidden)  # nothing on PATH: the tool must build it
    source = tmp_path / "nccl-tests-src"
    source.mkdir()
    (source / "Makefile").write_text(
        textwrap.dedent(f"""\
        all:
        \tmkdir -p build
        \tcp {hidden} build/all_reduce_perf
        \techo "make MPI=$(MPI) MPI_HOME=$(MPI_HOME)" > build/make.log
        """)
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(source)]
    for command in (["init", "-q"], ["add", "Makefile"], ["commit", "-qm", "fake"], ["tag", "v9.9.9"]):
        subprocess.run([*git, *command], check=True, capture_output=True)

    tests_dir = tmp_path / "nccl-tests"
    result = _validate(
        [*_required(slurm_cluster, tmp_path / "results"), "--nccl", f"--nccl-tests-dir={tests_dir}"],
        path_first=fake_bin,
        env_extra={"CV_NCCL_TESTS_REPO": str(source), "CV_NCCL_TESTS_VERSION": "v9.9.9", "MPI_HOME": "/opt/mpi"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no {tests_dir}/build/all_reduce_perf: building it first" in result.stderr
    assert "MPI=1 MPI_HOME=/opt/mpi" in (tests_dir / "build" / "make.log").read_text()
    build_log = next(_run_dir(tmp_path / "results").glob("build-nccl-tests-*.log")).read_text()
    assert f"built {tests_dir}/build/all_reduce_perf (v9.9.9)" in build_log


def test_job_scripts_work_with_plain_sbatch(slurm_cluster, tmp_path, fake_bin):
    # The seed's manual route: sbatch the cloud's script directly; it finds its folder
    # through the path Slurm recorded, not through $0 (a copy in Slurm's spool).
    a, b = _two_nodes(slurm_cluster)
    env = {
        **os.environ,
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "CV_GPUS_PER_NODE": "2",
        "CV_BUSBW_THRESHOLD": "40",
    }
    env.pop("CV_CLOUD_DIR", None)
    ids = {}
    for script, nodes in (("nccl.sh", f"{a},{b}"), ("dcgmi_diag.sh", f"{a},{b}")):
        submitted = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                slurm_cluster.partition,
                "-w",
                nodes,
                "-o",
                str(tmp_path / f"{script}.log"),
                str(CSP_TOOLS / "azure" / script),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=30,
        )
        assert submitted.returncode == 0, submitted.stderr
        ids[script] = submitted.stdout.strip().split(";")[0]
    for script, job in ids.items():
        assert slurm_cluster.wait(job, timeout_s=120) == "COMPLETED", (tmp_path / f"{script}.log").read_text()
    nccl_log = (tmp_path / "nccl.sh.log").read_text()
    assert f"CV_RESULT nccl {a},{b} PASS busbw=45.10 GB/s >= 40 GB/s" in nccl_log
    # Azure's settings and topology file reach the ranks.
    assert f"NCCL_TOPO_FILE={CSP_TOOLS / 'azure' / 'topo.xml'}" in nccl_log
    assert "NCCL_IB_TIMEOUT=22" in nccl_log
    dcgm_log = (tmp_path / "dcgmi_diag.sh.log").read_text()
    assert f"CV_RESULT dcgm {a} PASS" in dcgm_log and f"CV_RESULT dcgm {b} PASS" in dcgm_log
    assert (tmp_path / f"dcgmi-{a}.log").exists()  # CV_LOG_DIR defaults to the submit folder


# ---- verdicts and blame, without Slurm ---------------------------------------------------------------


def _write_run(run_dir: Path, dcgm: dict, nccl: dict) -> None:
    """A run folder as cluster_validation.sh leaves it: plan plus logs with CV_RESULT lines (None = no log)."""
    run_dir.mkdir()
    plan = ["# test plan"]
    for node, verdict in dcgm.items():
        log = run_dir / "dcgmi_diag-1.log"
        plan.append(f"dcgm {node} 1 {log}")
        if verdict is not None:
            with log.open("a") as f:
                f.write(f"CV_RESULT dcgm {node} {verdict}\n")
    for job, (pair, verdict) in enumerate(nccl.items(), start=2):
        log = run_dir / f"nccl-{job}.log"
        plan.append(f"nccl {pair} {job} {log}")
        if verdict is not None:
            log.write_text(f"all_reduce_perf output\nCV_RESULT nccl {pair} {verdict}\n")
    (run_dir / "plan").write_text("\n".join(plan) + "\n")


def _report(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CSP_TOOLS / "common" / "report.sh"), str(run_dir)], capture_output=True, text=True, timeout=30
    )


def test_ring_of_pairs_blames_only_the_bad_node(tmp_path):
    # n3 is bad: both pairs it is in fail; its neighbours pass with their other partner.
    ok, slow = "PASS busbw=180 GB/s >= 150 GB/s", "FAIL busbw=20 GB/s < 150 GB/s"
    _write_run(
        tmp_path / "run",
        dcgm={n: "PASS" for n in ("n1", "n2", "n3", "n4")},
        nccl={"n1,n2": ok, "n2,n3": slow, "n3,n4": slow, "n4,n1": ok},
    )
    result = _report(tmp_path / "run")
    assert result.returncode == 1
    failed = result.stdout.split("FAILED NODES", 1)[1].strip().splitlines()[1:]
    assert failed == ["  n3: nccl"]


def test_a_pair_failing_alone_blames_no_node_but_fails(tmp_path):
    ok, slow = "PASS busbw=180 GB/s", "FAIL busbw=20 GB/s < 150 GB/s"
    _write_run(tmp_path / "run", dcgm={}, nccl={"n1,n2": slow, "n2,n3": ok, "n3,n1": ok})
    result = _report(tmp_path / "run")
    assert result.returncode == 1
    assert "FAILED NODES" not in result.stdout
    assert "an NCCL pair failed although each of its nodes passed with another partner" in result.stdout


def test_jobs_that_left_no_verdict_count_as_failures(tmp_path):
    _write_run(tmp_path / "run", dcgm={"n1": "PASS", "n2": None}, nccl={"n1,n2": None})
    result = _report(tmp_path / "run")
    assert result.returncode == 1
    assert re.search(r"^  n2 +FAIL no result: the job ended early or was cancelled", result.stdout, re.M)
    assert re.search(r"^  n1 n2 +FAIL no log: the job never started", result.stdout, re.M)
    assert "  n2: dcgm, nccl" in result.stdout


def test_report_of_a_folder_without_plan_is_an_error(tmp_path):
    result = _report(tmp_path)
    assert result.returncode == 2
    assert f"is {tmp_path} a cluster validation run folder?" in result.stderr


def _bash_lib(call: str, tmp_path: Path, text: str) -> str:
    (tmp_path / "input").write_text(text)
    result = subprocess.run(
        ["bash", "-c", f'source "{CSP_TOOLS}/common/lib.sh" && {call}'],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


ROW = (
    "  8589934592    2147483648     float     sum      -1 352000.0   24.40   {bw}      {w1}"
    "  352100.0   24.39   {bw}      {w2}\n"
)


@pytest.mark.parametrize(
    "output, verdict",
    [
        (
            ROW.format(bw="190.2", w1=0, w2=0) + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 190.2\n",
            "PASS busbw=190.2 GB/s >= 150 GB/s",
        ),
        (
            ROW.format(bw="90.5", w1=0, w2=0) + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 90.5\n",
            "FAIL busbw=90.5 GB/s < 150 GB/s",
        ),
        (
            ROW.format(bw="190.2", w1=3, w2=0) + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 190.2\n",
            "FAIL busbw=190.2 GB/s but 3 wrong results",
        ),
        (
            ROW.format(bw="190.2", w1=0, w2=0) + "# Out of bounds values : 7 FAILED\n# Avg bus bandwidth    : 190.2\n",
            "FAIL busbw=190.2 GB/s but 7 out-of-bounds values",
        ),
        (
            ROW.format(bw="190.2", w1=0, w2=0) + "node1: Test NCCL failure common.cu:1005 'unhandled system error'\n",
            'FAIL no "Avg bus bandwidth" line: all_reduce_perf did not finish',
        ),
        (
            "node1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_ib0:1/IB\n"
            + ROW.format(bw="151", w1="N/A", w2="N/A")
            + "# Avg bus bandwidth    : 151\n",
            "PASS busbw=151 GB/s >= 150 GB/s",
        ),
    ],
)
def test_nccl_verdict(tmp_path, output, verdict):
    assert _bash_lib("cv_nccl_verdict input 150", tmp_path, output) == verdict


@pytest.mark.parametrize(
    "table, status, verdict",
    [
        ("| Deployment | Pass |\n| Memory | Pass - All |\n", 0, "PASS"),
        (
            "| Deployment | Pass |\n| Memory | Fail - GPU: 3 |\n| PCIe | Fail - GPU: 1 |\n",
            0,
            "FAIL Memory: Fail - GPU: 3; PCIe: Fail - GPU: 1",
        ),
        (
            "Error: unable to connect to host engine\n",
            255,
            "FAIL dcgmi exited with status 255: Error: unable to connect to host engine",
        ),
    ],
)
def test_dcgm_verdict(tmp_path, table, status, verdict):
    assert _bash_lib(f"cv_dcgm_verdict input {status}", tmp_path, table) == verdict
