"""Support for the multimodal data tests: an image server on localhost with failing, slow, flaky and broken URLs,
a coloured-shapes repository whose rows point at it, and the resolved tiny_shapes config."""

import http.server
import os
import threading
import time
import urllib.parse

import pytest

from nemo_launcher.jobs.multimodal.shapes import shape_example, write_repository
from tests.jobs.data.test_data_steps import resolved

# What the server does for the rows whose index ends in each digit; other rows are served at once.
KINDS = {1: "missing", 3: "slow", 5: "error", 7: "flaky", 9: "garbage"}
SERVED = {None, "flaky", "delay"}  # kinds whose image arrives (flaky after one retry)
# The client's timeout (config_for) and a slow answer well beyond it. The timeout leaves room for a loaded CI machine:
# at 1 s, served images timed out there too while the test server's thread waited for the CPU.
TIMEOUT_S = 3
SLOW_S = 8.0


class ImageServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.requests = {}
        self.lock = threading.Lock()

    def url(self, kind, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{kind or 'ok'}/{os.path.relpath(path, self.root)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        kind, _, rest = urllib.parse.urlsplit(self.path).path.lstrip("/").partition("/")
        with self.server.lock:
            seen = self.server.requests[self.path] = self.server.requests.get(self.path, 0) + 1
        if kind == "missing":
            return self.send_error(404)
        if kind == "error" or (kind == "flaky" and seen == 1):
            return self.send_error(503 if kind == "flaky" else 500)
        if kind == "slow":
            time.sleep(SLOW_S)
        if kind == "delay":
            time.sleep(0.15)
        if kind == "garbage":
            body = b"this is not an image"
        else:
            with open(os.path.join(self.server.root, rest), "rb") as handle:
                body = handle.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on a slow answer
            pass


@pytest.fixture(scope="session")
def image_server(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("served"))
    server = ImageServer(root)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def served_repository(server: ImageServer, name: str, num_examples: int, kind_of):
    """A shapes repository <server root>/<name>/repository whose row i is served as kind_of(i); returns (its folder,
    {index: caption} of the rows whose image arrives)."""
    root = os.path.join(server.root, name)
    repository = os.path.join(root, "repository")
    write_repository(
        repository, num_examples, 2, 48, seed=3, url_for=lambda index, path: server.url(kind_of(index), path)
    )
    return root, {index: shape_example(index, 3, 48)[1] for index in range(num_examples) if kind_of(index) in SERVED}


def config_for(tmp_path, repository_root, *overrides):
    """The tiny_shapes config on a served repository (no generate_shapes), with test-sized settings."""
    return str(
        resolved(
            "multimodal/tiny_shapes",
            tmp_path,
            "progress=false",
            "generate_shapes.enable=false",
            f"dataset_repo_url=file://{repository_root}/repository",
            f"+download_images.img2dataset_additional_arguments.timeout={TIMEOUT_S}",
            "+download_images.img2dataset_additional_arguments.retries=1",
            *overrides,
        )
    )
