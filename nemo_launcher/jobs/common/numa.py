"""CPU affinity for the processes of one node, from the top-level `numa_mapping` settings.

The launcher passes the settings as JSON in NEMO_LAUNCHER_NUMA_MAPPING; a job program calls
`apply_numa_mapping()` first thing, before it starts threads, so data-loader workers inherit the mask.

    NEMO_LAUNCHER_NUMA_MAPPING='{"enable": true, "mode": "unique_contiguous", ...}' python3 -m ...

Modes (per process, among the processes of this node):
  all                 every allowed CPU
  single              the CPUs of the NUMA domain (socket) the process falls in
  single_unique       one core of that domain
  unique_contiguous   an equal, contiguous share of the domain's cores
  unique_interleaved  an equal share taken every n-th core
"""

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

MODES = ("all", "single", "single_unique", "unique_interleaved", "unique_contiguous")
ENV_NAME = "NEMO_LAUNCHER_NUMA_MAPPING"


def parse_cpu_list(text: str) -> list[int]:
    """Linux cpulist syntax: "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def read_topology(sys_root: Path = Path("/sys/devices/system")) -> dict[str, dict[int, list[int]]]:
    """NUMA domains (node id -> CPUs) and hyper-thread siblings (CPU -> its siblings) of this machine."""
    domains = {}
    for node in sorted((sys_root / "node").glob("node[0-9]*")):
        cpus = parse_cpu_list((node / "cpulist").read_text())
        if cpus:
            domains[int(node.name[4:])] = cpus
    siblings = {}
    for cpu_dir in (sys_root / "cpu").glob("cpu[0-9]*"):
        path = cpu_dir / "topology" / "thread_siblings_list"
        if path.exists():
            siblings[int(cpu_dir.name[3:])] = parse_cpu_list(path.read_text())
    return {"domains": domains, "siblings": siblings}


def cpus_for_process(
    settings: Mapping, local_rank: int, local_size: int, allowed: Sequence[int], topology: Mapping
) -> list[int]:
    """The CPU set of process `local_rank` of `local_size` on this node."""
    mode = settings.get("mode", "unique_contiguous")
    if mode not in MODES:
        raise ValueError(f"numa_mapping.mode={mode!r}: choose one of {', '.join(MODES)}")
    allowed_set = set(allowed)
    if mode == "all":
        return sorted(allowed_set)
    # Scope "socket" splits the processes over NUMA domains first; "node" treats the machine as one domain.
    domains = (
        [sorted(set(cpus) & allowed_set) for cpus in topology["domains"].values()]
        if settings.get("scope") == "socket"
        else []
    )
    domains = [cpus for cpus in domains if cpus] or [sorted(allowed_set)]
    per_domain = max(1, -(-local_size // len(domains)))
    domain = domains[min(local_rank // per_domain, len(domains) - 1)]
    rank_in_domain, size_in_domain = local_rank % per_domain, min(per_domain, local_size)
    if settings.get("cores", "all_logical") == "single_logical":
        # One logical CPU per physical core: drop hyper-thread siblings.
        seen, physical = set(), []
        for cpu in domain:
            if cpu not in seen:
                physical.append(cpu)
                seen.update(topology["siblings"].get(cpu, [cpu]))
        domain = physical
    if mode == "single":
        return domain
    if mode == "single_unique":
        return [domain[rank_in_domain % len(domain)]]
    share = len(domain) // size_in_domain if settings.get("balanced", True) else -(-len(domain) // size_in_domain)
    share = max(int(settings.get("min_cores") or 1), share)
    if settings.get("max_cores"):
        share = min(share, int(settings["max_cores"]))
    if mode == "unique_contiguous":
        start = rank_in_domain * share
        chosen = domain[start : start + share]
    else:  # unique_interleaved
        chosen = domain[rank_in_domain::size_in_domain][:share]
    # More processes than cores: share rather than leave a process with no CPU.
    return chosen or [domain[rank_in_domain % len(domain)]]


def apply_numa_mapping(env: Mapping[str, str] | None = None) -> list[int] | None:
    """Pins this process as the settings say; returns the CPU set, or None when mapping is off or unsupported."""
    env = os.environ if env is None else env
    raw = env.get(ENV_NAME)
    if not raw or not hasattr(os, "sched_setaffinity"):
        return None
    settings = json.loads(raw)
    if not settings.get("enable", False):
        return None
    local_rank = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", 0)))
    local_size = int(str(env.get("LOCAL_WORLD_SIZE", env.get("SLURM_NTASKS_PER_NODE", "1"))).split("(")[0])
    cpus = cpus_for_process(settings, local_rank, local_size, sorted(os.sched_getaffinity(0)), read_topology())
    os.sched_setaffinity(0, cpus)
    return cpus
