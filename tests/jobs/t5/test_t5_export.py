"""T5 export -> Triton model repository -> served here with PyTriton (deployment/serve_pytriton.py) -> client: the
served answer is the one the framework model gives (greedy decoding in this process, no server)."""

import signal
import sys

import pytest

from tests.conftest import require_module
from tests.jobs.server_ports import server_ports

torch = require_module("torch")
require_module("pytriton")

from tests.jobs.gpt.test_deployment import REPO, _start  # noqa: E402
from tests.jobs.gpt_train_support import run_training  # noqa: E402
from tests.jobs.t5_tuning_support import tiny_t5_nemo  # noqa: E402

PROMPT = "question: what colour is the river ? context: the river is green ."
MAX_TOKENS = 5
MODEL = "t5_tiny"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from nemo_launcher.launch.stage_config import write_stage_config

    folder = tmp_path_factory.mktemp("t5_export")
    nemo = tiny_t5_nemo(folder)
    config = write_stage_config(
        folder / "export.yaml",
        "export",
        "t5/export_t5",
        data_dir=folder / "data",
        base_results_dir=folder / "results",
        overrides=[
            "run.model_train_name=t5_tiny",
            f"model.checkpoint_path={nemo}",
            "model.weight_data_type=fp32",
            "triton_deployment.data_type=fp32",
            "triton_deployment.tokens_to_generate=3",
            "triton_deployment.max_batch_size=2",
            "triton_deployment.instance_kind=KIND_CPU",
        ],
    )
    result = run_training(config, program=("nemo_launcher.jobs.t5.export",))
    assert "warning" not in (result.stdout + result.stderr).lower()
    repositories = list((folder / "results" / "t5_tiny").glob("export_*/model_repo"))
    assert len(repositories) == 1
    return nemo, repositories[0]


@pytest.fixture(scope="module")
def direct(exported):
    """The answer the model itself gives to PROMPT, in this process."""
    from nemo_launcher.jobs.t5.generate import greedy_answers
    from nemo_launcher.jobs.t5.standalone import load_t5_from_nemo

    model, tokenizer = load_t5_from_nemo(exported[0])
    source = tokenizer.encode(PROMPT) + [tokenizer.eos]
    ids = greedy_answers(model, [source], tokenizer, MAX_TOKENS)[0]
    assert ids, "a random model that ends its answer at once would make the comparison weak"
    short = greedy_answers(model, [source], tokenizer, 3)[0]
    return {"ids": ids, "text": tokenizer.decode(ids), "default": (tokenizer.decode(short), short)}


def test_export_names_the_t5_generator_and_packs_the_model(exported):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from nemo_launcher.jobs.t5.standalone import load_t5_nemo

    model_dir = exported[1] / MODEL
    assert sorted(str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.is_file()) == [
        "1/model.nemo",
        "1/model.py",
        "config.pbtxt",
    ]
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    assert parameters["generator"] == "nemo_launcher.jobs.t5.serving:T5Generator"
    assert (parameters["data_type"], parameters["tokens_to_generate"]) == ("fp32", "3")
    packed, original = load_t5_nemo(model_dir / "1" / "model.nemo")[1], load_t5_nemo(exported[0])[1]
    assert packed.keys() == original.keys() and all(torch.equal(packed[k], original[k]) for k in original)


def test_pytriton_serves_the_framework_models_answers(exported, direct, tmp_path):
    http, grpc = server_ports(2)
    log = tmp_path / "serve.log"
    server = _start(
        [
            sys.executable,
            "deployment/serve_pytriton.py",
            "--model-repository",
            str(exported[1]),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
        ],
        log,
        ready=lambda text: "ready: model '" in text,  # anywhere: tritonserver may not have ended its line
    )
    try:
        sys.path.insert(0, str(REPO / "deployment"))
        from client import ask

        assert ask(f"http://127.0.0.1:{http}", MODEL, PROMPT, max_tokens=MAX_TOKENS) == (direct["text"], direct["ids"])
        # Without max_tokens the repository's tokens_to_generate (3) applies; gRPC answers alike.
        assert ask(f"grpc://127.0.0.1:{grpc}", MODEL, PROMPT) == direct["default"]
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]


def test_bf16_serving_casts_every_weight_and_answers(exported):
    """The export's default data_type: the local spec would mix fp32 norms with bf16 matmuls without Float16Module."""
    import numpy as np

    from nemo_launcher.jobs.t5.serving import T5Generator

    generator = T5Generator.load(str(exported[1] / MODEL / "1" / "model.nemo"), "bf16", 3)
    assert {p.dtype for p in generator.model.parameters()} == {torch.bfloat16}
    outputs = generator.answer({"prompt": np.array([[PROMPT.encode()]], dtype=object)})
    assert outputs["output_ids"].shape[0] == 1 and outputs["completion"].shape == (1, 1)
