"""How the PPO roles talk: JSON over HTTP, one server per role on that role's rank 0, the actor as the only client.

    client = RoleClient("critic", *role_address("critic", cfg.actor.remote_critic_rm.critic.ip, port), timeout_s=600)
    client.wait_ready(deadline_s=900)                   # GET /health until {"ready": true, ...}
    values = client.call("values", {"tokens": [[5, 9, 2]]})["values"]

    server = RoleServer("critic", port, {"values": values, "train": train}, share=broadcast_share())
    server.serve(on_shutdown=write_nemo)                # returns after POST /shutdown answered {"ok": true}

Endpoints and their payloads are in the PPO part of the RLHF interfaces (docs/rlhf.md): /rewards, /logprobs, /values,
/train, /save, /load, plus GET /health and POST /shutdown on every role.

Only rank 0 of a role listens. Every request goes through one queue and is handled on the main thread, one at a time,
in arrival order; a role of several processes (tensor or data parallel) hands each request from rank 0 to every rank
(`share`, a torch.distributed broadcast) so all ranks run the same handler on the same payload and their collectives
meet. GET /health is answered from the listening thread, so a role busy with a long /train still says it is alive.

A handler that raises RequestError (a payload it cannot serve) answers 400, any other exception 500 (its traceback
goes to the role's own log); the client raises RoleError naming the role, the endpoint and the message either way.
Only the standard library is used here: a server's model code lives in the program that builds the handlers.
"""

import http.client
import http.server
import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping

from ...contract.rlhf_roles import HOST_VARIABLES
from ..common.report import JobFault

Handler = Callable[[dict], dict]
# share(message) on rank 0 sends `message` to every rank of the role and returns it; share(None) on the other ranks
# waits for rank 0's message and returns it.
Share = Callable[[object], object]

_SHUTDOWN = "shutdown"
# The other ranks of a role wait for the next request inside a collective (the broadcast), which fails after the
# process group's timeout (30 minutes here); the actor may leave a role idle longer (long generations, validation).
# With no request for HEARTBEAT_S seconds rank 0 sends an empty message that ends the wait.
_HEARTBEAT = ""
HEARTBEAT_S = 60.0
_LOCALHOST = "localhost"


class RoleError(JobFault):
    """A role did not answer, or answered with an error: the message names the role, its address and the cause."""

    exit_code = 1


class RequestError(ValueError):
    """Raised by a handler for a payload it cannot serve (a missing field, ragged lists): answered as 400."""


def role_address(role: str, ip: str | None, port: int, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(host, port) of a server role: the config's ip when set, else the host the launcher exported for the role
    (the first node of its Slurm het group; localhost on the interactive backend), else localhost."""
    if ip:
        return str(ip), int(port)
    env = os.environ if env is None else env
    return env.get(HOST_VARIABLES[role]) or _LOCALHOST, int(port)


class RoleClient:
    """The actor's handle on one server role. `timeout_s` bounds each request (a critic's /train may take minutes)."""

    def __init__(self, name: str, host: str, port: int, timeout_s: float):
        self.name, self.host, self.port, self.timeout_s = name, host, int(port), float(timeout_s)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def wait_ready(self, deadline_s: float, poll_s: float = 0.5) -> dict:
        """GET /health until the role answers {"ready": true}; RoleError when `deadline_s` seconds pass first."""
        give_up = time.monotonic() + deadline_s
        last = "no answer"
        while True:
            try:
                status, body = self._request("GET", "/health", None, min(self.timeout_s, 10.0))
                if status == 200 and body.get("ready"):
                    return body
                last = f"answered {body}"
            except (OSError, http.client.HTTPException, ValueError) as error:
                last = f"{type(error).__name__}: {error}"
            if time.monotonic() >= give_up:
                raise RoleError(
                    f"the {self.name} role at {self.address} was not ready within {deadline_s:g} s ({last}); its own "
                    "log says why (or raise run.server_wait_s if it is still loading)"
                )
            time.sleep(poll_s)

    def call(self, endpoint: str, payload: dict) -> dict:
        """POST /<endpoint> with `payload` as JSON; returns the JSON answer, raises RoleError on any failure."""
        try:
            status, body = self._request("POST", f"/{endpoint}", payload, self.timeout_s)
        except TimeoutError:
            raise RoleError(
                f"the {self.name} role at {self.address} did not answer /{endpoint} within {self.timeout_s:g} s"
            ) from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise RoleError(
                f"the {self.name} role at {self.address} failed on /{endpoint}: {type(error).__name__}: {error}"
            ) from None
        if status != 200:
            raise RoleError(
                f"the {self.name} role at {self.address} refused /{endpoint} (HTTP {status}): {body.get('error', body)}"
            )
        return body

    def _request(self, method: str, path: str, payload: dict | None, timeout_s: float) -> tuple[int, dict]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        try:
            data = None if payload is None else json.dumps(payload).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else {}
        finally:
            connection.close()


class _Pending:
    """One request waiting for the main thread: the listening thread blocks on `done` and then writes `answer`."""

    def __init__(self, endpoint: str, payload: dict):
        self.endpoint, self.payload = endpoint, payload
        self.answer: tuple[int, dict] = (500, {"error": "not handled"})
        self.done = threading.Event()
        self.sent = threading.Event()  # set once the answer is written, so /shutdown's reply leaves before we exit


class RoleServer:
    """Serves `handlers` (endpoint name -> function of the JSON payload returning a JSON-able dict) for one role.

    Every rank of the role builds one with the same handlers; rank 0 listens on `port` (all interfaces: the actor
    runs on other nodes). Listening starts at construction (a port in use fails before the model loads); /health
    says ready only once serve() runs."""

    def __init__(
        self,
        role: str,
        port: int,
        handlers: Mapping[str, Handler],
        share: Share | None = None,
        rank: int = 0,
        port_key: str = "port",
        bind_host: str = "0.0.0.0",
        heartbeat_s: float = HEARTBEAT_S,
    ):
        if _SHUTDOWN in handlers:
            raise ValueError("/shutdown is every role's own endpoint; pass the work to do then as on_shutdown")
        if rank != 0 and share is None:
            raise ValueError("a rank other than 0 receives its requests through share: pass broadcast_share()")
        self.role, self.port, self.rank = role, int(port), rank
        self.handlers = dict(handlers)
        # Facts about the served model that /health reports beside "ready" (e.g. vocab_size, for the actor to check).
        self.info: dict = {}
        self._share = share
        self._heartbeat_s = heartbeat_s
        self._fault: JobFault | None = None
        self._inbox: queue.Queue[_Pending] = queue.Queue()
        self._ready = threading.Event()
        self._http: http.server.ThreadingHTTPServer | None = None
        if rank == 0:
            try:
                self._http = _RoleHTTPServer((bind_host, self.port), self)
            except OSError as error:
                raise RoleError(
                    f"{port_key}={self.port}: the {role} role cannot listen there ({error.strerror or error}); "
                    "choose a free port"
                ) from None
            self.port = self._http.server_address[1]  # port 0 (tests) binds a free one
            threading.Thread(target=self._http.serve_forever, name=f"{role}-http", daemon=True).start()

    def serve(self, on_shutdown: Callable[[], dict] | None = None) -> None:
        """Handles requests until POST /shutdown, which runs `on_shutdown` (e.g. writing the trained model) on every
        rank and answers {"ok": true, **its result} before this returns. A handler that raises a JobFault has its
        request answered with the fault's message, then serve() raises the fault (the program exits with its code)."""
        if self.rank == 0:
            self._ready.set()
            print(f"{self.role}: serving on http://{socket.gethostname()}:{self.port}", flush=True)
            print(f"{self.role}: ready", flush=True)
            self._serve_as_leader(on_shutdown)
        else:
            self._serve_as_follower(on_shutdown)

    def _serve_as_leader(self, on_shutdown) -> None:
        while True:
            try:
                pending = self._inbox.get(timeout=self._heartbeat_s if self._share is not None else None)
            except queue.Empty:
                self._share((_HEARTBEAT, None))  # the other ranks' wait ends well inside the collective's timeout
                continue
            if self._share is not None:
                self._share((pending.endpoint, pending.payload))
            pending.answer = self._handle(pending.endpoint, pending.payload, on_shutdown)
            pending.done.set()
            if pending.endpoint == _SHUTDOWN or self._fault is not None:
                pending.sent.wait(timeout=30)
                self._http.shutdown()
                self._http.server_close()
                if self._fault is not None:
                    raise self._fault
                return

    def _serve_as_follower(self, on_shutdown) -> None:
        while True:
            endpoint, payload = self._share(None)
            if endpoint == _HEARTBEAT:
                continue
            self._handle(endpoint, payload, on_shutdown)
            if self._fault is not None:
                raise self._fault
            if endpoint == _SHUTDOWN:
                return

    def _handle(self, endpoint: str, payload: dict, on_shutdown) -> tuple[int, dict]:
        try:
            if endpoint == _SHUTDOWN:
                return 200, {"ok": True, **(on_shutdown() if on_shutdown is not None else {})}
            return 200, self.handlers[endpoint](payload)
        except RequestError as error:
            return 400, {"error": str(error)}
        except JobFault as error:
            # A fault the role cannot go on from (a full disk while saving): the client is told, then the role
            # stops with the fault's exit status (74 for storage), as any job does.
            self._fault = error
            return 500, {"error": f"{error} (the {self.role} role stops)"}
        except Exception as error:  # noqa: BLE001 - the client is told; the traceback stays in this role's log
            traceback.print_exc(file=sys.stderr)
            return 500, {"error": f"{type(error).__name__}: {error}"}

    def submit(self, endpoint: str, payload: dict) -> _Pending:
        """Queues a request for the main thread (the listening thread's half of a POST)."""
        pending = _Pending(endpoint, payload)
        self._inbox.put(pending)
        return pending


class _RoleHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # a role restarted on the same node rebinds its port at once

    def __init__(self, address, role_server: RoleServer):
        self.role_server = role_server
        super().__init__(address, _RoleRequestHandler)


class _RoleRequestHandler(http.server.BaseHTTPRequestHandler):
    server: _RoleHTTPServer

    def do_GET(self):  # noqa: N802 - the name http.server dispatches to
        role = self.server.role_server
        if self.path.rstrip("/") != "/health":
            self._answer(404, {"error": f"GET {self.path}: only /health is a GET endpoint"})
            return
        self._answer(200, {**role.info, "ready": role._ready.is_set(), "role": role.role, "pid": os.getpid()})

    def do_POST(self):  # noqa: N802
        role = self.server.role_server
        endpoint = self.path.strip("/")
        if endpoint != _SHUTDOWN and endpoint not in role.handlers:
            known = ", ".join(f"/{name}" for name in [*sorted(role.handlers), _SHUTDOWN])
            self._answer(404, {"error": f"the {role.role} role has no /{endpoint} (it serves {known})"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as error:
            self._answer(400, {"error": f"/{endpoint}: the body is not JSON ({error})"})
            return
        if not isinstance(payload, dict):
            self._answer(400, {"error": f"/{endpoint}: the body must be a JSON object, not {type(payload).__name__}"})
            return
        pending = role.submit(endpoint, payload)
        pending.done.wait()
        try:
            self._answer(*pending.answer)
        finally:
            pending.sent.set()

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        """Silent: one line per request would bury the role's log under the actor's traffic."""


def broadcast_share(group=None) -> Share:
    """A `share` for a role of several processes: rank 0's message reaches every rank of `group` (the default group
    when None) through torch.distributed.broadcast_object_list."""
    import torch.distributed as dist  # deferred: the protocol itself needs no torch

    def share(message):
        box = [message]
        dist.broadcast_object_list(box, src=0, group=group)
        return box[0]

    return share
