"""Serve a GPT or T5 model repository written by the export stage on this machine, with PyTriton.

    python3 deployment/serve_pytriton.py --model-repository <results>/<run>/export_<summary>/model_repo
    python3 deployment/client.py --url http://127.0.0.1:8000 --model <model name> --prompt "Hello"

PyTriton (`nvidia-pytriton`) starts a Triton Inference Server from its own wheel, so no Triton container is
needed. The model's config.pbtxt gives the name, max_batch_size and the generation settings; 1/model.nemo
the weights, and its `generator` parameter the class that answers (GPT's TextGenerator when absent). Requests run
through the same generator as the repository's Python backend, so both
servers give the same answers. Runs until Ctrl-C or SIGTERM, then stops the server and its processes and
exits 0 (1 if the server dies on its own). Prints `ready: ...` once requests are accepted.
"""

import argparse
import os
import signal
import sys
import sysconfig
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def prefer_this_libpython() -> None:
    """Puts this interpreter's libpython first on LD_LIBRARY_PATH (PyTriton passes the environment on).

    PyTriton's python-backend stub links `libpython3.X.so`; the loader may otherwise find the system's copy
    of another patch release (Debian's 3.11.2 beside a pyenv 3.11.7), and the model then fails to load with
    `'_thread.RLock' object has no attribute '_recursion_count'`. A no-op for a static interpreter.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    if not (libdir and sysconfig.get_config_var("Py_ENABLE_SHARED")):
        return
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    if not paths or paths[0] != libdir:
        os.environ["LD_LIBRARY_PATH"] = ":".join([libdir] + [p for p in paths if p != libdir])


def read_model_config(model_dir: Path):
    """config.pbtxt parsed with Triton's own protobuf schema (tritonclient ships it)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = model_dir / "config.pbtxt"
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file; is {model_dir} a model the export stage wrote?")
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def find_model_dir(repository: Path, name) -> Path:
    if name:
        return repository / name
    models = sorted(p for p in repository.iterdir() if (p / "config.pbtxt").is_file()) if repository.is_dir() else []
    if len(models) != 1:
        raise SystemExit(
            f"error: {repository} holds {len(models)} models ({', '.join(p.name for p in models) or 'none'}); "
            "name one with --model"
        )
    return models[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model-repository", type=Path, required=True, help="the model_repo folder the export stage wrote"
    )
    parser.add_argument("--model", help="model name (folder) inside the repository; needed when it holds several")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for every interface)")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    args = parser.parse_args(argv)

    prefer_this_libpython()
    sys.path.insert(0, str(REPO_ROOT))
    import numpy as np
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from nemo_launcher.jobs.serving.text import INPUTS, MODEL_FILE, NUMPY_TYPES, OUTPUTS, generator_from_parameters

    model_dir = find_model_dir(args.model_repository, args.model)
    config = read_model_config(model_dir)
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    generator = generator_from_parameters(parameters, str(model_dir / "1" / MODEL_FILE))

    def infer(requests):
        # Unbatched on purpose: each request's prompts are answered as the Python backend answers them.
        return [
            generator.answer({name: request.data.get(name) for name in ("prompt", "max_tokens")})
            for request in requests
        ]

    def tensors(specs):
        dtype = {np.object_: bytes}
        return [
            Tensor(
                name=s.name,
                dtype=dtype.get(NUMPY_TYPES[s.triton_type], NUMPY_TYPES[s.triton_type]),
                shape=s.dims,
                optional=s.optional,
            )
            for s in specs
        ]

    triton_config = TritonConfig(
        http_address=args.host,
        http_port=args.http_port,
        grpc_address=args.host,
        grpc_port=args.grpc_port,
        allow_metrics=False,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with Triton(config=triton_config) as triton:
        triton.bind(
            model_name=config.name or model_dir.name,
            infer_func=infer,
            inputs=tensors(INPUTS),
            outputs=tensors(OUTPUTS),
            config=ModelConfig(max_batch_size=config.max_batch_size),
        )
        triton.run()  # returns once the server and the model accept requests
        print(
            f"ready: model {config.name or model_dir.name!r} on http://{args.host}:{args.http_port} "
            f"and grpc://{args.host}:{args.grpc_port}",
            flush=True,
        )
        while not stop.wait(timeout=5.0):
            if not triton.is_alive():  # tritonserver or the model's proxy died: say so instead of hanging
                print("error: the Triton server stopped on its own; see its log above", file=sys.stderr, flush=True)
                return 1
        print("stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
