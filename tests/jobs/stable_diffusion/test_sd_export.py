"""Stable Diffusion and InstructPix2Pix export on the tiny model: the export program as the launcher writes its config
(fixed-batch ONNX graphs checked under onnxruntime, the whole pipeline on the graphs against the framework's, the
Triton entry), then the exported text-to-image pipeline served with PyTriton and queried with the seed's optional
inputs, its images compared with the framework's own from the .nemo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_module
from tests.jobs import warm_python
from tests.jobs.server_ports import server_ports

torch = require_module("torch")
np = require_module("numpy")
require_module("diffusers")
require_module("onnxruntime")

REPO = Path(__file__).resolve().parents[3]
IMAGES = 2  # num_images_per_prompt: every graph's batch
SIZE = 32  # image side: 16 x 16 latents through the tiny VAE's factor 2
PROMPT = "a red circle"


def _tiny_nemo(folder: Path, overrides=()) -> Path:
    """A tiny .nemo as the family's model module saves it (weights from the config's seeds: export needs no
    training)."""
    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.stable_diffusion.model import build_stable_diffusion, model_section, save_stable_diffusion
    from nemo_launcher.launch.stage_config import write_stage_config

    config = write_stage_config(
        folder / "training.yaml",
        "training",
        "stable_diffusion/tiny",
        data_dir=folder / "data",
        base_results_dir=folder / "results",
        overrides=list(overrides),
    )
    parts = build_stable_diffusion(model_section(load_resolved_config(config)["model"]))
    return save_stable_diffusion(folder / "model.nemo", parts)


def _export_config(folder: Path, choice: str, nemo: Path, overrides) -> Path:
    """The resolved export config the launcher writes for this .nemo (it refuses a mismatch with the model)."""
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        folder / "export.yaml",
        "export",
        choice,
        data_dir=folder / "data",
        base_results_dir=folder / "results",
        overrides=[f"model.restore_from_path={nemo}", "trainer.accelerator=cpu", "trainer.precision=32", *overrides],
    )


def _run_export(config: Path) -> subprocess.CompletedProcess:
    env = warm_python.environment(dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)))
    return subprocess.run(
        [warm_python.interpreter(), "-m", "nemo_launcher.jobs.stable_diffusion.export", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )


def _export(folder: Path, choice: str, nemo: Path, overrides) -> subprocess.CompletedProcess:
    return _run_export(_export_config(folder, choice, nemo, overrides))


def _out(folder: Path, name: str) -> Path:
    return next((folder / "results").glob(f"*/{name}"))


@pytest.fixture(scope="session")
def text2img(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sd_export")
    nemo = _tiny_nemo(folder)
    done = _export(
        folder,
        "stable_diffusion/export_stable_diffusion",
        nemo,
        [
            "infer.down_factor=2",
            f"infer.height={SIZE}",
            f"infer.width={SIZE}",
            f"infer.num_images_per_prompt={IMAGES}",
            "infer.inference_steps=6",
            "infer.seed=11",
            "infer.unconditional_guidance_scale=3.0",
            f"infer.prompts=[{PROMPT}]",
        ],
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return nemo, _out(folder, "export_stable_diffusion"), done


def test_export_writes_checked_fixed_batch_graphs_and_the_seed_layout(text2img):
    import onnxruntime

    _, out, done = text2img
    report = json.loads((out / "export_report.json").read_text())
    assert report["batch"] == {"vae": IMAGES, "unet": 2 * IMAGES, "clip": IMAGES}
    assert set(report["max_abs_difference"]) == {"vae", "unet", "clip", "pipeline"}
    assert all(0 <= value <= 1e-3 for value in report["max_abs_difference"].values()), report["max_abs_difference"]
    for name, batch in report["batch"].items():
        session = onnxruntime.InferenceSession(str(out / "onnx" / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        assert session.get_inputs()[0].shape[0] == batch, "the batch is fixed, as the seed's engines are"
    # TensorRT does not import here; the report and the log say so instead of pretending.
    assert report["tensorrt"]["built"] == {} and "TensorRT is not installed" in report["tensorrt"]["reason"]
    assert "TensorRT is not installed" in done.stdout and "onnx check" in done.stdout
    assert (out / "plan" / "infer_config.yaml").is_file()
    entry = out / "model_repo" / "stable_diffusion"
    assert sorted(p.name for p in (entry / "1").iterdir()) == sorted(
        ["model.py", "pipeline.json", "infer_config.yaml", "vae.onnx", "unet.onnx", "clip.onnx"]
    )
    config = (entry / "config.pbtxt").read_text()
    assert 'name: "stable_diffusion"' in config and 'backend: "python"' in config
    assert "Warning" not in done.stderr, done.stderr[-2000:]


def test_export_refuses_a_down_factor_the_model_does_not_have(tmp_path, text2img):
    """The launcher reads the .nemo and refuses (launch/model_sources.py); a config edited after the launch is refused
    by the job."""
    import yaml

    from nemo_launcher.launch.errors import ConfigError

    nemo, _, _ = text2img
    sizes = ["infer.height=32", "infer.width=32"]
    with pytest.raises(ConfigError) as refused:
        _export_config(tmp_path, "stable_diffusion/export_stable_diffusion", nemo, sizes)
    assert (
        str(refused.value)
        == f"export.infer.down_factor=8: the model ({nemo}) has a VAE that shrinks images 2-fold: set 2"
    )
    config = _export_config(tmp_path, "stable_diffusion/export_stable_diffusion", nemo, [*sizes, "infer.down_factor=2"])
    section = yaml.safe_load(config.read_text())
    section["infer"]["down_factor"] = 8
    config.write_text(yaml.safe_dump(section))
    done = _run_export(config)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: export.infer.down_factor=8: this model's VAE maps 2 pixels to one latent; set 2"
    )


def test_instruct_pix2pix_export_adds_the_vae_encoder_and_checks_the_edit(tmp_path):
    from PIL import Image

    nemo = _tiny_nemo(tmp_path, ["model.unet_config.in_channels=8"])
    Image.new("RGB", (40, 24), (200, 30, 30)).save(tmp_path / "input.png")
    done = _export(
        tmp_path,
        "instruct_pix2pix/export_instruct_pix2pix",
        nemo,
        [
            f"edit.input={tmp_path / 'input.png'}",
            "edit.resolution=32",
            "edit.num_images_per_prompt=2",
            "edit.combine_images=[1,2]",
            "edit.steps=4",
        ],
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((_out(tmp_path, "export_instruct_pix2pix") / "export_report.json").read_text())
    # The 40 x 24 input scaled to a longer side of 32 is 32 x 19, cut to the tiny model's multiple of 4: 32 x 16.
    assert report["batch"] == {"vae": 2, "unet": 6, "clip": 2, "vae_encoder": 1}
    assert all(value <= 1e-3 for value in report["max_abs_difference"].values()), report["max_abs_difference"]
    settings = json.loads((Path(report["entries"][0]) / "1" / "pipeline.json").read_text())
    assert (settings["task"], settings["width"], settings["height"]) == ("edit", 32, 16)
    assert Path(report["entries"][0]).name == "instruct_pix2pix"


@pytest.fixture(scope="module")
def served(text2img):
    """The exported stable_diffusion entry bound to a PyTriton server here (onnxruntime behind it)."""
    require_module("pytriton")
    sys.path.insert(0, str(REPO / "deployment"))
    from serve_pytriton import prefer_this_libpython

    prefer_this_libpython()
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from nemo_launcher.jobs.stable_diffusion.serving import NUMPY_TYPES, DiffusionServer

    _, out, _ = text2img
    server = DiffusionServer.load(out / "model_repo" / "stable_diffusion" / "1")

    def tensors(specs):
        return [
            Tensor(
                name=s.name,
                dtype=bytes if s.triton_type == "TYPE_STRING" else NUMPY_TYPES[s.triton_type],
                shape=s.dims,
                optional=s.optional,
            )
            for s in specs
        ]

    def infer(requests):
        return [
            server.answer({spec.name: request.data.get(spec.name) for spec in server.inputs}) for request in requests
        ]

    http, grpc = server_ports(2)
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=http,
        grpc_address="127.0.0.1",
        grpc_port=grpc,
        allow_metrics=False,
    )
    triton = Triton(config=config)  # its own short workspace: socket paths under a pytest folder can pass 107 bytes
    triton.bind(
        model_name="stable_diffusion",
        infer_func=infer,
        inputs=tensors(server.inputs),
        outputs=tensors(server.outputs),
        config=ModelConfig(batching=False),
    )
    triton.run()
    yield f"http://127.0.0.1:{config.http_port}"
    triton.stop()


def _query(url: str, **optional):
    from pytriton.client import ModelClient

    inputs = {"prompt": np.array([PROMPT.encode()], dtype=object)}
    kinds = {
        "seed": np.int64,
        "inference_steps": np.int32,
        "unconditional_guidance_scale": np.float32,
        "eta": np.float32,
    }
    inputs.update({name: np.array([value], dtype=kinds[name]) for name, value in optional.items()})
    with ModelClient(url, "stable_diffusion", init_timeout_s=120, inference_timeout_s=120) as client:
        return client.infer_sample(**inputs)["images"]


def test_served_pipeline_answers_with_the_framework_images_and_takes_the_optional_inputs(text2img, served):
    from nemo_launcher.jobs.stable_diffusion.model import load_stable_diffusion
    from nemo_launcher.jobs.stable_diffusion.onnx_parts import to_uint8
    from nemo_launcher.jobs.stable_diffusion.sampling import Sampling, text_to_images

    nemo, _, _ = text2img
    parts = load_stable_diffusion(nemo)

    def framework(seed, steps, scale, eta):
        images = text_to_images(
            parts,
            [PROMPT],
            Sampling(steps, "DDIM", eta),
            scale,
            IMAGES,
            SIZE,
            SIZE,
            torch.Generator().manual_seed(seed),
        )
        return to_uint8(images).astype(int)

    defaults = _query(served)  # every optional input left out: the export's values (seed 11, 6 steps, scale 3)
    assert defaults.shape == (IMAGES, SIZE, SIZE, 3) and defaults.dtype == np.uint8
    assert np.abs(defaults.astype(int) - framework(11, 6, 3.0, 0.0)).max() <= 1
    asked = _query(served, seed=5, inference_steps=3, unconditional_guidance_scale=1.0, eta=0.5)
    assert np.abs(asked.astype(int) - framework(5, 3, 1.0, 0.5)).max() <= 1
    assert np.abs(asked.astype(int) - defaults.astype(int)).max() > 1, "the optional inputs change the images"
