"""Export -> Triton model repository -> served here (PyTriton, and the tritonserver it bundles) -> client.

The servers are real: each test starts one as a subprocess on free loopback ports, sends the client's
generation request, compares the answer with the tokens the model generates directly, and stops it.
"""

import os
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import require_module
from tests.jobs.server_ports import server_ports
from tests.jobs.sft_support import tiny_bpe_files, tiny_nemo  # noqa: F401  (fixtures)

torch = require_module("torch")
require_module("pytriton")

REPO = Path(__file__).resolve().parents[3]
PROMPT = "The license grants you the right to"
MAX_TOKENS = 6
MODEL = "gpt3_tiny"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.gpt.export import ExportConfig, export

    root = tmp_path_factory.mktemp("export")
    cfg = ExportConfig.from_dict(
        {
            "run": {"name": "export_tiny", "results_dir": str(root), "time_limit": "0:10:00"},
            "model": {"checkpoint_path": tiny_nemo, "tensor_model_parallel_size": 1, "weight_data_type": "fp32"},
            "triton_deployment": {
                "triton_model_dir": str(root / "model_repo" / MODEL),
                "max_batch_size": 2,
                "data_type": "fp32",
                "tokens_to_generate": 4,
                "instance_kind": "KIND_CPU",
            },
        }
    )
    export(cfg)
    return root / "model_repo"


@pytest.fixture(scope="module")
def direct(tiny_nemo):  # noqa: F811
    """The tokens the model generates for PROMPT in this process, without any server."""
    from nemo_launcher.jobs.gpt.generate import greedy_generate
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    model, tokenizer = load_gpt_from_nemo(tiny_nemo)
    ids = greedy_generate(model, tokenizer.encode(PROMPT), MAX_TOKENS, tokenizer.eod, tokenizer.vocab_size, 64)
    assert len(ids) == MAX_TOKENS, "a random model that stops early would make the comparison weak"
    return {"ids": ids, "text": tokenizer.decode(ids), "default": (tokenizer.decode(ids[:4]), ids[:4])}


def test_export_writes_a_triton_model_repository(repository):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    model_dir = repository / MODEL
    assert sorted(str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.is_file()) == [
        "1/model.nemo",
        "1/model.py",
        "config.pbtxt",
    ]
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert (config.name, config.backend, config.max_batch_size) == (MODEL, "python", 2)
    assert [i.name for i in config.input] == ["prompt", "max_tokens"] and config.input[1].optional
    assert [o.name for o in config.output] == ["completion", "output_ids"]
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "data_type": "fp32",
        "tokens_to_generate": "4",
        "launcher_path": str(REPO),
    }
    assert not list(repository.glob(".*")), "the staging folder is gone"


def _descendants(pid: int):
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(argv, log: Path, env=None, ready=None, timeout_s: float = 240.0):
    """Starts a server; returns it once `ready(log text)` holds. Fails with the log if it exits first."""
    handle = open(log, "w")
    process = subprocess.Popen(
        argv,
        stdout=handle,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
    )
    deadline = time.monotonic() + timeout_s
    while not ready(log.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(f"server did not become ready (exit {process.returncode}):\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    return process


def _answers_ready(http_port: int, server: subprocess.Popen, log: Path, timeout_s: float = 240.0) -> None:
    """Waits until the server says it is ready over HTTP, the check the client makes first.

    A log line only says an endpoint started; if the server then stops answering, the failure shows its log and
    whether it is still running instead of the client's bare timeout.
    """
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http_proxy
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with direct.open(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=10) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    state = "still running" if server.poll() is None else f"exited with {server.returncode}"
    pytest.fail(f"server on port {http_port} never answered ready ({state}):\n{log.read_text()[-4000:]}")


def _client(url: str, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "deployment/client.py", "--url", url, "--model", MODEL, "--prompt", PROMPT, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def test_pytriton_server_answers_like_the_model_and_stops_cleanly(repository, direct, tmp_path):
    http, grpc = server_ports(2)
    log = tmp_path / "serve.log"
    server = _start(
        [
            sys.executable,
            "deployment/serve_pytriton.py",
            "--model-repository",
            str(repository),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
        ],
        log,
        ready=lambda text: "ready: model '" in text,  # anywhere: tritonserver may not have ended its line
    )
    try:
        _answers_ready(http, server, log)
        result = _client(f"http://127.0.0.1:{http}", "--max-tokens", str(MAX_TOKENS), "--ids")
        assert result.returncode == 0, result.stderr + log.read_text()[-3000:]
        text, ids = result.stdout.rstrip("\n").rsplit("\n", 1)
        assert ids == "ids: " + " ".join(map(str, direct["ids"]))
        assert text == direct["text"]

        sys.path.insert(0, str(REPO / "deployment"))
        from client import ask

        # gRPC too, and without max_tokens the model's tokens_to_generate (4) applies.
        assert ask(f"grpc://127.0.0.1:{grpc}", MODEL, PROMPT) == direct["default"]
        helpers = _descendants(server.pid)
        assert helpers, "tritonserver runs as a child of the server script"
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
    assert "stopping" in log.read_text()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in helpers if _alive(pid)], "tritonserver or a backend stub outlived the server"


def test_tritonserver_runs_the_exported_python_backend(repository, direct, tmp_path):
    """The repository itself (config.pbtxt + 1/model.py), loaded by the tritonserver that PyTriton bundles."""
    from pytriton.triton import TRITONSERVER_DIST_DIR
    from pytriton.utils.distribution import get_libs_path, get_stub_path

    backends = tmp_path / "backends" / "python"
    backends.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (backends / name).symlink_to(TRITONSERVER_DIST_DIR / "backends" / "python" / name)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (backends / "triton_python_backend_stub").symlink_to(get_stub_path(version))
    http, grpc = server_ports(2)
    libs = [sysconfig.get_config_var("LIBDIR"), str(get_libs_path())]  # this interpreter's libpython first
    env = {"LD_LIBRARY_PATH": ":".join(libs + [os.environ.get("LD_LIBRARY_PATH", "")])}
    log = tmp_path / "tritonserver.log"
    server = _start(
        [
            str(TRITONSERVER_DIST_DIR / "bin" / "tritonserver"),
            "--model-repository",
            str(repository),
            "--backend-directory",
            str(tmp_path / "backends"),
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
            f"--http-port={http}",
            f"--grpc-port={grpc}",
            "--allow-metrics=false",
        ],
        log,
        env=env,
        ready=lambda text: "Started HTTPService" in text,
    )
    try:
        _answers_ready(http, server, log)
        result = _client(f"http://127.0.0.1:{http}", "--max-tokens", str(MAX_TOKENS), "--ids")
        assert result.returncode == 0, result.stderr + log.read_text()[-3000:]
        assert result.stdout.rstrip("\n").rsplit("\n", 1) == [
            direct["text"],
            "ids: " + " ".join(map(str, direct["ids"])),
        ]
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
