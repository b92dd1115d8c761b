"""Check the Slurm cluster a config points at before anything is queued.

    python3 -m nemo_launcher.launch.preflight [the same overrides as main.py]
    python3 -m nemo_launcher.launch.preflight cluster.partition=batch container=nvcr.io/nvidia/nemo:24.01

Prints one line per check, PASS or FAIL, with the fix for each failure, and exits 1 if any check
fails. With `preflight: true` in conf/config.yaml the launcher runs the same checks before its first
sbatch. The failures caught here are the ones users otherwise meet hours later, when the job starts:
pyxis missing, a partition or account that does not exist, no GPU GRES, a results directory that
the compute nodes cannot write or that has no room for the next checkpoint.

Launch side: standard library and omegaconf only (never torch).
"""

import contextlib
import dataclasses
import getpass
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

# Oldest Slurm the launcher's scripts are known to work with: pyxis 0.9 and `--gpus-per-node` both
# need 20.11 or newer.
MIN_SLURM_VERSION = (20, 11)
# Seconds for one query of the controller (sinfo, scontrol, sacctmgr).
QUERY_TIMEOUT_S = 30
# Seconds the write test may wait for a compute node, queueing included (NEMO_LAUNCHER_PREFLIGHT_WAIT overrides).
WRITE_TEST_WAIT_S = 120
# Free space under base_results_dir below which the preflight fails when the run has no checkpoint yet. A run that
# has one needs room for one more of the same size (the next save is written before an older one is pruned);
# without one, this floor covers configs, logs and the first checkpoints of models up to about a billion
# parameters, and catches the usual failure: a file system that is full or nearly so.
MIN_FREE_BYTES = 5 * 2**30


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: `detail` says what was found, `fix` what to change when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    skipped: bool = False  # not run because an earlier check failed; counts as ok so the failure is reported once

    def line(self) -> str:
        status = "SKIP" if self.skipped else "PASS" if self.ok else "FAIL"
        text = f"{status}  {self.name:<26} {self.detail}"
        return f"{text}. Fix: {self.fix}" if not self.ok and self.fix else text


class _CommandFailed(Exception):
    """A Slurm command was missing, timed out or exited non-zero; the message says which and why."""


def _query(argv: Sequence[str], timeout: float = QUERY_TIMEOUT_S) -> str:
    if shutil.which(argv[0]) is None:
        raise _CommandFailed(f"`{argv[0]}` is not on PATH")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _CommandFailed(f"`{' '.join(argv)}` did not answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise _CommandFailed(f"`{' '.join(argv)}` failed: {message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout


def _partitions() -> list[str]:
    """Partition names as sinfo prints them; the default one keeps its trailing `*`."""
    return sorted(set(_query(["sinfo", "-h", "-o", "%P"]).split()))


def check_slurm_version() -> CheckResult:
    name = "slurm version"
    try:
        text = _query(["sinfo", "--version"]).strip()
    except _CommandFailed as error:
        return CheckResult(
            name, False, str(error), "run on the cluster's login node, where the Slurm client tools are installed"
        )
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return CheckResult(
            name, False, f"cannot read a version from {text!r}", "check that `sinfo --version` prints the Slurm version"
        )
    version = (int(match.group(1)), int(match.group(2)))
    if version < MIN_SLURM_VERSION:
        wanted = ".".join(map(str, MIN_SLURM_VERSION))
        return CheckResult(
            name,
            False,
            f"{text} is older than {wanted}",
            f"upgrade Slurm to {wanted} or newer (pyxis and --gpus-per-node need it)",
        )
    return CheckResult(name, True, text)


def check_controller() -> CheckResult:
    name = "slurm controller"
    try:
        text = _query(["scontrol", "ping"]).strip()
    except _CommandFailed as error:
        return CheckResult(
            name,
            False,
            str(error),
            "check that slurmctld is running and that this host may reach it (SLURM_CONF, munge)",
        )
    if "UP" not in text:
        return CheckResult(name, False, text, "ask the cluster's administrators to start slurmctld")
    return CheckResult(name, True, text.splitlines()[0])


def check_partition(partition: str | None) -> CheckResult:
    name = "partition"
    try:
        listed = _partitions()
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "check that the Slurm controller answers (scontrol ping)")
    names = [p.rstrip("*") for p in listed]
    choices = ", ".join(names) or "(none)"
    if partition is None:
        default = [p.rstrip("*") for p in listed if p.endswith("*")]
        if not default:
            return CheckResult(
                name,
                False,
                "cluster.partition is null and the cluster has no default partition",
                f"set cluster.partition to one of: {choices}",
            )
        return CheckResult(name, True, f"cluster.partition is null: jobs go to the default partition {default[0]}")
    if partition not in names:
        return CheckResult(
            name,
            False,
            f"cluster.partition={partition!r} does not exist",
            f"set cluster.partition to one of: {choices}",
        )
    state = re.search(r"\bState=(\S+)", _query(["scontrol", "show", "partition", partition]))
    if state and state.group(1) != "UP":
        return CheckResult(
            name,
            False,
            f"partition {partition} is {state.group(1)}",
            f"ask the administrators to bring it UP, or choose another of: {choices}",
        )
    return CheckResult(name, True, f"{partition} exists and is UP")


def _slurm_config() -> dict:
    config = {}
    for line in _query(["scontrol", "show", "config"]).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    return config


def check_account(account: str | None) -> CheckResult:
    name = "account"
    if account is None:
        return CheckResult(name, True, "cluster.account is null: Slurm uses your default account")
    try:
        storage = _slurm_config().get("AccountingStorageType", "")
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "check that the Slurm controller answers (scontrol ping)")
    if storage in ("", "accounting_storage/none"):
        return CheckResult(
            name,
            True,
            f"cannot be checked: the cluster keeps no accounting ({storage or 'no AccountingStorageType'}), "
            f"so --account={account} is recorded but not enforced",
        )
    user = getpass.getuser()
    try:
        mine = _query(["sacctmgr", "-n", "-P", "show", "associations", f"where user={user}", "format=account"]).split()
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "check that slurmdbd answers (sacctmgr show cluster)")
    if account in mine:
        return CheckResult(name, True, f"{user} may charge account {account}")
    yours = ", ".join(sorted(set(mine))) or "(none)"
    return CheckResult(
        name,
        False,
        f"user {user} has no association with account {account!r}",
        f"set cluster.account to one of your accounts: {yours} (sacctmgr show associations user={user})",
    )


def check_pyxis(container: str | None) -> CheckResult:
    name = "container (pyxis)"
    if not container:
        return CheckResult(name, True, "container is null: jobs run on the nodes' own Python, no pyxis needed")
    try:
        help_text = _query(["srun", "--help"])
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "run on the cluster's login node")
    if "--container-image" not in help_text:
        return CheckResult(
            name,
            False,
            f"container={container} needs the pyxis plugin, but `srun --help` lists no --container-image",
            "install pyxis (0.9.1 or newer) and enroot on the cluster, "
            "or set container=null to run without a container",
        )
    return CheckResult(name, True, "srun accepts --container-image (pyxis)")


def check_mpi(srun_args: Sequence[str]) -> CheckResult:
    name = "mpi plugins"
    try:
        text = _query(["srun", "--mpi=list"])
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "run on the cluster's login node")
    # Lines look like "\tpmix" or "srun: pmi2" depending on the Slurm version.
    plugins = []
    for line in text.splitlines():
        for word in line.split(":")[-1].split(","):
            word = word.strip()
            if word and " " not in word and word not in plugins:
                plugins.append(word)
    for arg in srun_args:
        match = re.fullmatch(r"--mpi=(\S+)", str(arg))
        if match and match.group(1) not in plugins:
            return CheckResult(
                name,
                False,
                f"cluster.srun_args asks for --mpi={match.group(1)}, but srun offers: {', '.join(plugins)}",
                f"use one of: {', '.join(p for p in plugins if p != 'none') or 'none'}",
            )
    found = [p for p in ("pmix", "pmi2") if p in plugins]
    if not found:
        return CheckResult(
            name,
            True,
            f"neither pmix nor pmi2 (srun offers: {', '.join(plugins)}); the launcher's jobs do not need MPI, "
            "but MPI programs such as nccl-tests cannot start through srun",
        )
    return CheckResult(name, True, f"{' and '.join(found)} available (srun --mpi=list: {', '.join(plugins)})")


def _gpu_counts(gres_text: str) -> list[int]:
    """GPU counts from sinfo's %G column: "gpu:8", "gpu:a100:8(S:0-1)", "gpu:4,nic:1" or "(null)"."""
    counts = []
    for entry in gres_text.split():
        for item in entry.split(","):
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu":
                counts.append(int(fields[-1]) if fields[-1].isdigit() else 1)
    return counts


def check_gpus(partition: str | None, gpus_per_node) -> CheckResult:
    name = "gpus per node"
    if gpus_per_node is None:
        return CheckResult(name, True, "cluster.gpus_per_node is null: jobs ask for no GPUs")
    argv = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
    try:
        counts = _gpu_counts(_query(argv))
    except _CommandFailed as error:
        return CheckResult(name, False, str(error), "check that the Slurm controller answers (scontrol ping)")
    where = f"partition {partition}" if partition else "the default partition"
    if not counts:
        return CheckResult(
            name,
            False,
            f"cluster.gpus_per_node={gpus_per_node} but {where} has no GPU GRES, "
            "so sbatch would reject --gpus-per-node",
            "set cluster.gpus_per_node=null on a cluster without GPU GRES, "
            "or ask the administrators to configure gres/gpu",
        )
    if max(counts) < int(gpus_per_node):
        return CheckResult(
            name,
            False,
            f"cluster.gpus_per_node={gpus_per_node} but the nodes of {where} have at most {max(counts)}",
            f"set cluster.gpus_per_node={max(counts)}",
        )
    return CheckResult(name, True, f"{where} offers gpu:{max(counts)} per node (asked: {gpus_per_node})")


# Runs on a compute node: for each folder, create it if needed, write and remove a file, print a verdict.
_WRITE_TEST = r"""
for dir in "$@"; do
  probe="$dir/.nemo-launcher-preflight-$SLURM_JOB_ID-$$"
  if error=$( { mkdir -p -- "$dir" && : > "$probe" && rm -f -- "$probe"; } 2>&1 ); then
    echo "PREFLIGHT-OK $dir"
  else
    echo "PREFLIGHT-FAIL $dir: $(echo "$error" | tail -n 1)"
  fi
done
"""


def check_writable_from_node(folders: Sequence[tuple], partition: str | None, account: str | None) -> list[CheckResult]:
    """One tiny job (1 task) writes a file in each (config key, folder) and removes it again."""
    wait_s = float(os.environ.get("NEMO_LAUNCHER_PREFLIGHT_WAIT", WRITE_TEST_WAIT_S))
    job_name = f"nemo-preflight-{uuid.uuid4().hex[:8]}"
    argv = ["srun", f"--job-name={job_name}", "--nodes=1", "--ntasks=1", "--time=2", "--quiet"]
    argv += [f"--partition={partition}"] if partition else []
    argv += [f"--account={account}"] if account else []
    argv += ["sh", "-c", _WRITE_TEST, "preflight", *[str(folder) for _, folder in folders]]
    names = [f"{key} writable" for key, _ in folders]
    if shutil.which("srun") is None:
        return [CheckResult(n, False, "`srun` is not on PATH", "run on the cluster's login node") for n in names]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        # Killing srun while it waits for an allocation can leave the request queued; cancel it by name.
        process.kill()
        process.communicate()
        subprocess.run(
            ["scancel", f"--name={job_name}", f"--user={getpass.getuser()}"],
            capture_output=True,
            timeout=QUERY_TIMEOUT_S,
        )
        return [
            CheckResult(
                n,
                True,
                f"cannot be checked: no compute node started the test job within {wait_s:.0f} s "
                "(busy cluster?); NEMO_LAUNCHER_PREFLIGHT_WAIT sets the wait",
                skipped=True,
            )
            for n in names
        ]
    verdicts = {}
    for line in out.splitlines():
        match = re.match(r"PREFLIGHT-(OK|FAIL) (.*)", line)
        if match:
            folder, _, reason = match.group(2).partition(": ") if match.group(1) == "FAIL" else (match.group(2), "", "")
            verdicts[folder] = (match.group(1) == "OK", reason)
    results = []
    for (key, folder), name in zip(folders, names):
        if str(folder) not in verdicts:
            message = (err.strip().splitlines() or [f"srun exited {process.returncode}"])[-1]
            results.append(
                CheckResult(
                    name,
                    False,
                    f"the test job did not run: {message}",
                    "fix the job submission first (partition, account); then rerun the preflight",
                )
            )
            continue
        ok, reason = verdicts[str(folder)]
        if ok:
            results.append(CheckResult(name, True, f"{key}={folder} is writable from a compute node"))
        else:
            results.append(
                CheckResult(
                    name,
                    False,
                    f"{key}={folder} is not writable from a compute node ({reason})",
                    f"set {key} to a shared folder that you may write and every node mounts",
                )
            )
    return results


def _size_text(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _newest_checkpoint(root: Path | None) -> Path | None:
    """The newest complete `step-<N>` folder under `root` (the training job's layout: a `COMPLETE` marker is
    written last), or None."""
    if root is None or not root.is_dir():
        return None
    from ..contract import CHECKPOINT_COMPLETE_MARKER as marker
    from ..contract import CHECKPOINT_STEP_PREFIX as prefix

    steps = [
        (int(p.name[len(prefix) :]), p)
        for p in root.glob(f"{prefix}*")
        if p.name[len(prefix) :].isdigit() and (p / marker).is_file()
    ]
    return max(steps)[1] if steps else None


def _folder_size(folder: Path) -> int:
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # pruned while we looked
                total += os.stat(os.path.join(parent, name)).st_size
    return total


def checkpoint_root(cfg: DictConfig) -> Path | None:
    """Where the training stage of `cfg` keeps its checkpoints, when the config says (else None)."""
    try:
        log_dir = OmegaConf.select(cfg, "training.exp_manager.explicit_log_dir", throw_on_missing=True)
    except Exception:  # noqa: BLE001  (a ??? or a broken interpolation: the size is then just unknown)
        return None
    return Path(str(log_dir)) / "checkpoints" if log_dir else None


def check_free_space(base_results_dir, checkpoints: Path | None) -> CheckResult:
    """Free space where base_results_dir is (or would be created) against what the next checkpoint needs."""
    name = "base_results_dir free space"
    where = Path(str(base_results_dir))
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError as error:
        return CheckResult(
            name,
            False,
            f"cannot read the free space of {where}: {error.strerror}",
            "set base_results_dir to a folder you may read",
        )
    newest = _newest_checkpoint(checkpoints)
    if newest is not None:
        needed, why = _folder_size(newest), f"the size of the newest checkpoint, {newest}"
    else:
        needed, why = MIN_FREE_BYTES, "no checkpoint of this run yet: the launcher's floor"
    detail = f"{_size_text(free)} free in {where}, {_size_text(needed)} needed ({why})"
    if free < needed:
        return CheckResult(
            name, False, detail, "free some space there, or set base_results_dir to a file system with room"
        )
    return CheckResult(name, True, detail)


def run_preflight(cfg: DictConfig) -> list[CheckResult]:
    """All checks for the cluster `cfg` points at, in order. Slurm checks stop early when no controller answers."""
    if cfg.get("cluster_type", "bcm") != "bcm":
        return [
            CheckResult(
                "cluster type", True, f"cluster_type={cfg.cluster_type}: the preflight checks Slurm clusters only (bcm)"
            )
        ]
    cluster = cfg.get("cluster") or {}
    partition = cluster.get("partition")
    account = cluster.get("account")
    results = [check_slurm_version()]
    if not results[0].ok and "not on PATH" in results[0].detail:
        return results
    results.append(check_controller())
    if not results[-1].ok:
        return results
    results.append(check_partition(partition))
    results.append(check_account(account))
    results.append(check_pyxis(cfg.get("container")))
    results.append(check_mpi(list(cluster.get("srun_args") or [])))
    partition_ok = results[-4].ok
    if partition_ok:
        results.append(check_gpus(partition, cluster.get("gpus_per_node")))
    if partition_ok and results[-4].ok:  # the account check
        folders = [("base_results_dir", cfg.base_results_dir), ("data_dir", cfg.data_dir)]
        results.extend(check_writable_from_node(folders, partition, account))
    else:
        # No job can start with a bad partition or account, and the GRES of a partition that does
        # not exist says nothing; these checks would only repeat the failure above.
        names = (["gpus per node"] if not partition_ok else []) + ["base_results_dir writable", "data_dir writable"]
        results.extend(
            CheckResult(name, True, "not checked: fix the partition or account above first", skipped=True)
            for name in names
        )
    results.append(check_free_space(cfg.base_results_dir, checkpoint_root(cfg)))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .resolvers import REPO_ROOT, register_resolvers

    register_resolvers()
    overrides = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in overrides):
        print(__doc__.strip())
        return 0
    GlobalHydra.instance().clear()  # a caller (tests, the launcher) may have initialized Hydra already
    try:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        results = run_preflight(cfg)
    except (HydraException, OmegaConfBaseException) as error:
        # Same one-line form as main.py's errors: a typo in an override is a user error, not a crash.
        print(f"Error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    for result in results:
        print(result.line(), flush=True)
    failed = sum(not r.ok for r in results)
    skipped = sum(r.skipped for r in results)
    summary = f"{failed} of {len(results)} checks failed" if failed else f"all {len(results) - skipped} checks passed"
    print(summary + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
