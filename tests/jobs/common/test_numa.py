"""CPU affinity from numa_mapping, on a made-up two-socket topology (no real pinning needed)."""

import json
import os

import pytest

from nemo_launcher.jobs.common.numa import apply_numa_mapping, cpus_for_process, parse_cpu_list

# Two sockets of 4 cores with 2 hyper-threads each: socket 0 = CPUs 0-3 and 8-11, socket 1 = 4-7 and 12-15.
TOPOLOGY = {
    "domains": {0: [0, 1, 2, 3, 8, 9, 10, 11], 1: [4, 5, 6, 7, 12, 13, 14, 15]},
    "siblings": {c: [c % 8, c % 8 + 8] for c in range(16)},
}
ALLOWED = list(range(16))


def cpus(rank, size, **settings):
    return cpus_for_process(settings, rank, size, ALLOWED, TOPOLOGY)


def test_cpu_list_syntax():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_unique_contiguous_splits_the_node_without_overlap():
    shares = [cpus(rank, 4, mode="unique_contiguous") for rank in range(4)]
    assert shares == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_socket_scope_keeps_processes_on_their_socket():
    assert cpus(0, 2, mode="single", scope="socket") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert cpus(1, 2, mode="single", scope="socket") == [4, 5, 6, 7, 12, 13, 14, 15]


def test_single_logical_drops_hyperthread_siblings_and_max_cores_caps():
    assert cpus(0, 1, mode="unique_contiguous", cores="single_logical", scope="socket") == [0, 1, 2, 3]
    assert cpus(1, 2, mode="unique_interleaved", max_cores=2) == [1, 3]


def test_all_and_single_unique():
    assert cpus(3, 8, mode="all") == ALLOWED
    assert cpus(3, 8, mode="single_unique") == [3]


def test_bad_mode_is_named():
    with pytest.raises(ValueError, match="numa_mapping.mode='fastest'"):
        cpus(0, 1, mode="fastest")


def test_apply_pins_this_process_and_off_means_untouched():
    before = os.sched_getaffinity(0)
    try:
        env = {
            "NEMO_LAUNCHER_NUMA_MAPPING": json.dumps({"enable": True, "mode": "single_unique"}),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }
        chosen = apply_numa_mapping(env)
        assert len(chosen) == 1 and os.sched_getaffinity(0) == set(chosen)
        assert apply_numa_mapping({"NEMO_LAUNCHER_NUMA_MAPPING": json.dumps({"enable": False})}) is None
        # A single process with no launcher variables at all takes its share as process 0 of 1.
        os.sched_setaffinity(0, before)
        assert apply_numa_mapping(
            {"NEMO_LAUNCHER_NUMA_MAPPING": json.dumps({"enable": True, "mode": "all"})}
        ) == sorted(before)
    finally:
        os.sched_setaffinity(0, before)
