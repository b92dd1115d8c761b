"""A warm interpreter for the job tests: one process per pytest worker that has imported torch, megatron-core and
PyTorch Lightning once, and forks a child for each `python -m <module> ...` that the tests start through the
interpreter stand-in (warm_shim.py). See warm_python.py for why and for what it leaves to fresh processes.

    python3 -m tests.jobs.warm_server <socket path>

A request, sent over the Unix socket by the stand-in with its standard input, output and error attached:
{"module" or "code": ..., "args": [...], "env": {...}, "cwd": ..., "executable": <stand-in path>,
"unbuffered": bool}. The answers are a line `pid <n>` once the child runs and a line `exit <code>` when it ends
(negative: killed by that signal). A connection that closes first (the stand-in killed) takes the child's process
group with it.

The child starts as `python -m` would: its own process group, the request's environment, directory, argv and
`sys.executable` (the stand-in, so that what it starts in turn, such as torchrun's ranks, is warm as well),
fresh random seeds, and the module run as `__main__`; it ends as a fresh interpreter would, exit handlers run.
"""

import contextlib
import gc
import importlib
import json
import os
import random
import runpy
import selectors
import signal
import socket
import sys
import threading
import types

from tests.jobs.warm_shim import HEADER  # the request's length in bytes, ahead of its JSON

# What most job programs import before their first step; each costs its import once here instead of in every
# child. The job programs themselves are not imported: runpy runs each as __main__ from its source.
WARM_IMPORTS = (
    "nemo_launcher.jobs",  # installs the job side's import hooks before torch is imported
    "numpy",
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "megatron.core",
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel",
    "megatron.core.transformer",
    "megatron.core.models.gpt",
    "megatron.core.dist_checkpointing",
    "megatron.core.optimizer",
    "megatron.core.datasets.indexed_dataset",  # imports boto3 for S3 paths: 0.2 s
    "torch.utils.tensorboard",
    "transformers",  # conversions to Hugging Face, the diffusion and CLIP text encoders
    # Not diffusers: it would save the diffusion programs 3 s each, but it imports TorchDynamo, and with TorchDynamo
    # loaded every other program takes the slower real paths of the job package's import hooks (measured: the GPT
    # trainer tests 43 -> 53 CPU-s).
    "lightning_fabric",
    "pytorch_lightning",
    "omegaconf",
    "yaml",
)


def _receive_request(connection: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _flags, _address = socket.recv_fds(connection, HEADER.size, 3)
    while len(head) < HEADER.size:
        head += connection.recv(HEADER.size - len(head))
    (length,) = HEADER.unpack(head)
    body = b""
    while len(body) < length:
        chunk = connection.recv(length - len(body))
        if not chunk:
            raise ConnectionError("the stand-in closed the connection mid-request")
        body += chunk
    return json.loads(body), fds


def _start_child(request: dict, fds: list[int]) -> None:
    """In the forked child: becomes the process the request describes."""
    os.setpgid(0, 0)
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request.get("module", "-c"), *request["args"]]
    sys.executable = request["executable"]
    sys.path[0] = request["cwd"]
    if request["unbuffered"]:
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
    # A fresh interpreter seeds these from the system's entropy; forks would otherwise share one sequence.
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def serve(path: str) -> dict | None:
    """Answers requests until stdin closes (the pytest worker is gone); returns a request in each child."""
    for name in WARM_IMPORTS:
        importlib.import_module(name)
    # Forks share the imported objects' memory until they write to it, and a garbage collection writes to every
    # object it visits: without this, each child's first full collection would walk and copy all of the above.
    gc.collect()
    gc.freeze()
    if threading.active_count() != 1:
        raise RuntimeError(f"a warm import started threads, which a fork would not carry: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wake-up pipe
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(wake_read, selectors.EVENT_READ, "child ended")
    selector.register(sys.stdin, selectors.EVENT_READ, "worker gone")
    children: dict[int, socket.socket] = {}  # pid -> the connection of its stand-in
    print("ready", flush=True)
    while True:
        for key, _events in selector.select():
            if key.data == "worker gone":
                for pid in children:
                    os.killpg(pid, signal.SIGKILL)
                return None
            if key.data == "child ended":
                os.read(wake_read, 4096)
                _reap(children, selector)
                continue
            if key.data == "request":
                connection, _address = listener.accept()
                request, fds = _receive_request(connection)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for handle in (listener, connection, *children.values()):
                        handle.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    _start_child(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                children[pid] = connection
                connection.sendall(f"pid {pid}\n".encode())
                selector.register(connection, selectors.EVENT_READ, pid)
                continue
            # The stand-in's connection is readable only when it closed: the stand-in is gone, so is its child.
            pid = key.data
            selector.unregister(key.fileobj)
            os.killpg(pid, signal.SIGKILL)


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is None:
            continue
        with contextlib.suppress(KeyError):  # unregistered when its stand-in went away first
            selector.unregister(connection)
        with contextlib.suppress(OSError):  # the stand-in is gone; nobody waits for the status
            connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        connection.close()


def main() -> None:
    request = serve(sys.argv[1])
    if request is None:
        return
    if "code" in request:  # as `python -c`: the code runs as __main__, sys.path[0] the directory
        sys.path[0] = ""
        main_module = types.ModuleType("__main__")
        main_module.__builtins__ = __builtins__
        sys.modules["__main__"] = main_module
        exec(compile(request["code"], "<string>", "exec"), main_module.__dict__)
    else:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
