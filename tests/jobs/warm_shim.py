"""The interpreter stand-in of the warm interpreter (warm_python.py writes it out with a `#!<python> -SE` line, the
real interpreter's path in REAL_PYTHON below).

`<stand-in> [-u] -m <module> <args>` (or `-c <code> <args>`) asks the warm interpreter of
NEMO_LAUNCHER_TEST_WARM_SOCKET to run the module (or the code) in a child with this process's standard streams,
environment and directory, passes on the signals it gets, and ends as the child ended (with its exit status, or
killed by the same signal). Anything else (other options, a script, no warm interpreter) runs the real interpreter
in its place, as if it had been called.
Standard library only, no site packages: it starts in a few milliseconds.
"""

import json
import os
import signal
import socket
import struct
import sys

REAL_PYTHON = sys.executable  # warm_python.py writes the real interpreter's path here
SOCKET_VARIABLE = "NEMO_LAUNCHER_TEST_WARM_SOCKET"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!Q")


def _real_interpreter(argv: list[str]) -> None:
    os.execv(REAL_PYTHON, [REAL_PYTHON, *argv])


def _parse(argv: list[str]) -> dict | None:
    """{"module" or "code": ..., "args": [...], "unbuffered": bool} of `[-u] -m <module> ...` or `[-u] -c <code> ...`;
    None for anything else."""
    unbuffered = False
    while argv and argv[0] == "-u":
        unbuffered, argv = True, argv[1:]
    if len(argv) >= 2 and argv[0] in ("-m", "-c"):
        return {"module" if argv[0] == "-m" else "code": argv[1], "args": argv[2:], "unbuffered": unbuffered}
    return None


def _read_line(connection: socket.socket, pending: bytearray) -> str:
    while b"\n" not in pending:
        chunk = connection.recv(4096)
        if not chunk:
            raise ConnectionError("the warm interpreter closed the connection")
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


def main(argv: list[str]) -> None:
    parsed = _parse(argv)
    path = os.environ.get(SOCKET_VARIABLE)
    if parsed is None or not path:
        _real_interpreter(argv)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        _real_interpreter(argv)  # the warm interpreter is gone (its pytest worker ended)
    request = {
        **parsed,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "executable": os.path.abspath(sys.argv[0]),
    }
    request["unbuffered"] = request["unbuffered"] or bool(os.environ.get("PYTHONUNBUFFERED"))
    body = json.dumps(request).encode()
    socket.send_fds(connection, [HEADER.pack(len(body))], [0, 1, 2])
    connection.sendall(body)
    pending = bytearray()
    pid = int(_read_line(connection, pending).split()[1])
    for number in FORWARDED:
        signal.signal(number, lambda received, _frame: os.kill(pid, received))
    code = int(_read_line(connection, pending).split()[1])
    if code < 0:  # killed by a signal: so is the stand-in, for whoever waits on it
        if -code in FORWARDED:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
