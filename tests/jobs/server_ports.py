"""Ports for the test servers (PyTriton, tritonserver) that nothing else on the machine takes meanwhile.

free_port() asks the kernel for a port from its ephemeral range and closes it: the server binds it a moment later,
and on a busy CI machine any outgoing connection (a Slurm command, a gloo rendezvous, an HTTP client) may be given
that same port in between. tritonserver then stops with "Socket '127.0.0.1:<port>' already in use" and the client
waits for a server that is gone. Ports below the ephemeral range are never handed out that way; the ones chosen
here are also below 20000, where the Slurm jobs' MASTER_PORT (20000 + job id % 20000) lives.
"""

import random
import socket
from pathlib import Path

_LOWEST, _BELOW = 10000, 20000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def server_ports(count: int) -> list[int]:
    """`count` distinct ports, each free now and outside the kernel's ephemeral range."""
    low, high = _ephemeral_range()
    candidates = [port for port in range(_LOWEST, _BELOW) if not low <= port <= high]
    chosen: list[int] = []
    for port in random.Random().sample(candidates, len(candidates)):  # workers started together pick differently
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"no {count} free ports between {_LOWEST} and {_BELOW}")
