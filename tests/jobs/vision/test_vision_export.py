"""export=vit/export_vit and clip/export_clip: ONNX graphs that compute the saved model's outputs under onnxruntime at
any batch up to max_batch_size (the job's own check and an independent one here), TensorRT said plainly where it is
missing, the Triton entries vit_trt, clip_vision_trt and clip_trt, and those entries served here by PyTriton with
onnxruntime behind them and queried over HTTP."""

import importlib.util
import json
import subprocess

import numpy as np
import pytest

from tests.conftest import require_module
from tests.jobs import warm_python
from tests.jobs.gpt_train_support import REPO, environment
from tests.jobs.server_ports import server_ports

from .vision_models import random_vision_nemo

torch = require_module("torch")
onnxruntime = require_module("onnxruntime")
require_module("pytriton")

MAX_BATCH = 4
TEXTS = ["a red circle", "a blue square", "a green triangle"]


def _export_config(root, name: str, choice: str, nemo, overrides=()):
    """The resolved export config the launcher writes for this .nemo (it refuses a mismatch with the model)."""
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        root / f"{name}.yaml",
        "export",
        choice,
        data_dir=root / "data",
        base_results_dir=root / "results",
        overrides=[
            "trainer.accelerator=cpu",
            f"model.restore_from_path={nemo}",
            f"infer.out_path={root / name}",
            "infer.max_dim=32",
            f"infer.max_batch_size={MAX_BATCH}",
            *overrides,
        ],
    )


def _run(program: str, config):
    return subprocess.run(
        [warm_python.interpreter(), "-m", program, "--config", str(config)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=400,
    )


def _export(root, name: str, choice: str, program: str, nemo, overrides=()):
    return _run(program, _export_config(root, name, choice, nemo, overrides))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("vision_export")
    models = {
        "vit": random_vision_nemo(root / "vit.nemo", "vit/tiny", class_names=[f"c{i}" for i in range(12)]),
        "clip": random_vision_nemo(root / "clip.nemo", "clip/tiny"),
    }
    runs = {
        "vit": _export(root, "vit", "vit/export_vit", "nemo_launcher.jobs.vit.export", models["vit"]),
        "clip": _export(
            root,
            "clip",
            "clip/export_clip",
            "nemo_launcher.jobs.clip.export",
            models["clip"],
            ["infer.max_text=48", f"infer.deployment_dir={root / 'server'}"],
        ),
    }
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-3000:]
    return {"root": root, "models": models, "runs": runs}


def _pixels(batch: int, seed: int):
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", ["vit", "clip"])
def test_export_checks_its_graphs_and_says_what_it_built(exported, family):
    out = exported["root"] / family
    report = json.loads((out / "export_report.json").read_text())
    graphs = {"vit": ["vit"], "clip": ["clip_vision", "clip_text"]}[family]
    assert sorted(report["max_abs_difference"]) == sorted(graphs)
    assert all(value <= 1e-4 for value in report["max_abs_difference"].values())
    assert report["checked_batch_sizes"] == [1, MAX_BATCH]
    assert sorted(p.name for p in (out / "onnx").iterdir()) == sorted(f"{g}.onnx" for g in graphs)
    stdout = exported["runs"][family].stdout
    if importlib.util.find_spec("tensorrt") is None:
        assert report["tensorrt"]["built"] == {} and "TensorRT is not installed here" in report["tensorrt"]["reason"]
        assert "TensorRT is not installed here" in stdout
    settings = (out / "plan" / "infer_config.yaml").read_text()
    assert f"max_batch_size: {MAX_BATCH}" in settings and "max_dim: 32" in settings
    assert "onnx check" in stdout and "Warning" not in stdout + exported["runs"][family].stderr


def test_the_graphs_take_any_batch_up_to_the_maximum(exported):
    from nemo_launcher.jobs.vision.saved_models import load_vision_model

    vit = load_vision_model(exported["models"]["vit"])
    session = onnxruntime.InferenceSession(str(exported["root"] / "vit" / "onnx" / "vit.onnx"))
    clip = load_vision_model(exported["models"]["clip"])
    text = onnxruntime.InferenceSession(str(exported["root"] / "clip" / "onnx" / "clip_text.onnx"))
    for batch in range(1, MAX_BATCH + 1):
        images = _pixels(batch, batch)
        (logits,) = session.run(None, {"images": images.numpy()})
        assert np.abs(logits - vit.classify(images).numpy()).max() <= 1e-4
        captions = (TEXTS * 2)[:batch]
        tokens = torch.tensor([clip.tokenizer.encode(t, 48) for t in captions])
        (features,) = text.run(None, {"tokens": tokens.numpy()})
        assert np.abs(features - clip.text_features(captions).numpy()).max() <= 1e-4


def test_triton_entries_are_named_and_typed_as_the_seed_deploys_them(exported):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    def config(family, name):
        path = exported["root"] / family / "model_repo" / name / "config.pbtxt"
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())

    vit, vision, clip = config("vit", "vit_trt"), config("clip", "clip_vision_trt"), config("clip", "clip_trt")
    assert (vit.platform, vit.max_batch_size, list(vit.input[0].dims), list(vit.output[0].dims)) == (
        "onnxruntime_onnx",
        MAX_BATCH,
        [3, 32, 32],
        [12],
    )
    assert (vision.platform, [o.name for o in vision.output]) == ("onnxruntime_onnx", ["image_features"])
    assert (clip.backend, clip.max_batch_size, [i.name for i in clip.input]) == ("python", 0, ["image", "texts"])
    assert clip.parameters["vision_model"].string_value == "clip_vision_trt"
    files = sorted(p.name for p in (exported["root"] / "clip" / "model_repo" / "clip_trt" / "1").iterdir())
    assert files == ["clip_serving.json", "clip_text.onnx", "model.py"]
    server = exported["root"] / "server"  # infer.deployment_dir: the seed's deployment/server gets the same entries
    assert sorted(p.name for p in server.iterdir()) == ["clip_trt", "clip_vision_trt"]
    assert (server / "clip_trt" / "config.pbtxt").read_text() == (
        exported["root"] / "clip" / "model_repo" / "clip_trt" / "config.pbtxt"
    ).read_text()


def test_a_max_dim_other_than_the_models_is_one_error_line(exported, tmp_path):
    """The launcher reads the .nemo and refuses; a config changed after the launch meets the same rule in the job."""
    import yaml

    from nemo_launcher.launch.errors import ConfigError

    nemo = exported["models"]["vit"]
    line = (
        f"export.infer.max_dim=64: the model ({nemo}) takes 32 x 32 pixel images (its position table is fixed): set 32"
    )
    with pytest.raises(ConfigError) as refused:
        _export_config(tmp_path, "refused", "vit/export_vit", nemo, ["infer.max_dim=64"])
    assert str(refused.value) == line
    config = _export_config(tmp_path, "wrong", "vit/export_vit", nemo)
    section = yaml.safe_load(config.read_text())
    section["infer"]["max_dim"] = 64
    config.write_text(yaml.safe_dump(section))
    run = _run("nemo_launcher.jobs.vit.export", config)
    assert run.returncode == 2
    assert [text for text in run.stderr.splitlines() if text.strip()] == [f"Error: {line}"]


def _prefer_this_libpython():
    spec = importlib.util.spec_from_file_location("serve_pytriton", REPO / "deployment" / "serve_pytriton.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.prefer_this_libpython()


def test_pytriton_serves_the_exported_entries(exported):
    """The entries as a Triton server in this process: vit_trt and clip_vision_trt through onnxruntime, clip_trt through
    its ClipScorer with the vision entry in place of the BLS request; answers equal the saved models'."""
    from pytriton.client import ModelClient
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from nemo_launcher.jobs.clip.serving import ClipScorer
    from nemo_launcher.jobs.vision.saved_models import load_vision_model

    _prefer_this_libpython()
    sessions = {
        name: onnxruntime.InferenceSession(str(exported["root"] / family / "model_repo" / name / "1" / "model.onnx"))
        for family, name in (("vit", "vit_trt"), ("clip", "clip_vision_trt"))
    }
    scorer = ClipScorer.load(exported["root"] / "clip" / "model_repo" / "clip_trt" / "1")

    def graph(name, input_name):
        @batch
        def infer(**inputs):
            (output,) = sessions[name].run(None, {input_name: inputs[input_name]})
            return {sessions[name].get_outputs()[0].name: output}

        return infer

    def clip_infer(requests):
        answers = []
        for request in requests:
            (features,) = sessions["clip_vision_trt"].run(None, {"images": request.data["image"][np.newaxis]})
            answers.append(scorer.answer(features, request.data["texts"]))
        return answers

    image = [Tensor(name="images", dtype=np.float32, shape=(3, 32, 32))]
    http, grpc = server_ports(2)
    config = TritonConfig(
        http_port=http,
        grpc_port=grpc,
        allow_metrics=False,
        http_address="127.0.0.1",
        grpc_address="127.0.0.1",
    )
    with Triton(config=config) as triton:  # its own short workspace: socket paths under tmp_path can pass 107 bytes
        triton.bind(
            model_name="vit_trt",
            infer_func=graph("vit_trt", "images"),
            inputs=image,
            outputs=[Tensor(name="logits", dtype=np.float32, shape=(12,))],
            config=ModelConfig(max_batch_size=MAX_BATCH),
        )
        triton.bind(
            model_name="clip_vision_trt",
            infer_func=graph("clip_vision_trt", "images"),
            inputs=image,
            outputs=[Tensor(name="image_features", dtype=np.float32, shape=(32,))],
            config=ModelConfig(max_batch_size=MAX_BATCH),
        )
        triton.bind(
            model_name="clip_trt",
            infer_func=clip_infer,
            inputs=[
                Tensor(name="image", dtype=np.float32, shape=(3, 32, 32)),
                Tensor(name="texts", dtype=bytes, shape=(-1,)),
            ],
            outputs=[
                Tensor(name=n, dtype=np.float32, shape=(-1,)) for n in ("similarities", "logits", "probabilities")
            ],
            config=ModelConfig(batching=False),
        )
        triton.run()
        url = f"http://127.0.0.1:{config.http_port}"
        images = _pixels(3, 7)
        with ModelClient(url, "vit_trt", init_timeout_s=60) as client:
            logits = client.infer_batch(images=images.numpy())["logits"]
        with ModelClient(url, "clip_trt", init_timeout_s=60) as client:
            answer = client.infer_sample(
                image=images[0].numpy(), texts=np.array([t.encode() for t in TEXTS], dtype=object)
            )
    vit = load_vision_model(exported["models"]["vit"])
    assert np.abs(logits - vit.classify(images).numpy()).max() <= 1e-4
    clip = load_vision_model(exported["models"]["clip"])
    cosine = clip.text_features(TEXTS) @ clip.image_features(images[:1])[0]
    assert answer["similarities"] == pytest.approx(cosine.tolist(), abs=1e-4)
    assert answer["probabilities"] == pytest.approx(torch.softmax(cosine * clip.logit_scale(), 0).tolist(), abs=1e-4)
