"""Export of a Stable Diffusion, DreamBooth or InstructPix2Pix `.nemo` (or training checkpoint), run as
`python3 -m nemo_launcher.jobs.stable_diffusion.export --config <resolved export yaml>` (schemas:
contract/schemas/sd_export.py).

    <out>/onnx/{vae,unet,clip}.onnx (+ vae_encoder.onnx)   fp32 graphs, batch fixed at num_images_per_prompt
    <out>/plan/<graph>.plan                                TensorRT engines, where TensorRT builds them
    <out>/plan/infer_config.yaml                           the inference settings (the served defaults)
    <out>/model_repo/stable_diffusion | instruct_pix2pix   the Triton entry: the whole pipeline (triton_model.py)
    <out>/export_report.json                               what was written and checked

Every graph runs under onnxruntime on the same random inputs as its network; then the whole pipeline runs once on
the graphs and once on the networks from the same seed (the export's prompt, or instruction and example image).
The largest difference of each is reported; above check_tolerance the job fails (exit 1) and serves nothing.
"""

import dataclasses
import json
import sys
from pathlib import Path

from ...contract.schemas.sd_export import (
    EDIT_MODEL,
    INFER_CONFIG_FILE,
    SD_MODEL,
    STAGE,
    EditExportConfig,
    SdExportConfig,
)
from ..common.config import JobConfigError

PROG = "python3 -m nemo_launcher.jobs.stable_diffusion.export"
CHECK_STEPS = 4  # denoising steps of the whole-pipeline check (each step runs every graph but the encoders)


@dataclasses.dataclass(frozen=True)
class Task:
    """What one export config asks for, in the terms the graphs and the served pipeline use."""

    edit: bool
    images: int  # num_images_per_prompt: every graph's batch
    height: int
    width: int
    prompt: str  # the whole-pipeline check's prompt or instruction
    defaults: dict  # the served defaults


def _task(cfg, parts) -> Task:
    from .sampling import resize_for_edit, size_multiple, vae_factor

    multiple, factor = size_multiple(parts), vae_factor(parts)
    if isinstance(cfg, EditExportConfig):
        e = cfg.edit
        if parts.unet.config.in_channels != 2 * parts.config.channels:
            raise JobConfigError(
                f"{STAGE}.model.restore_from_path={cfg.model.restore_from_path!r}: a text-to-image model "
                "(its UNet reads no input image); export it with export=stable_diffusion/export_stable_diffusion"
            )
        from PIL import Image

        try:
            width, height = resize_for_edit(Image.open(e.input), e.resolution, multiple).size
        except OSError as error:
            raise JobConfigError(f"{STAGE}.edit.input={e.input!r}: not an image ({error})") from None
        defaults = {"seed": e.seed, "steps": e.steps, "cfg_text": e.cfg_text, "cfg_image": e.cfg_image}
        return Task(True, e.num_images_per_prompt, height, width, e.prompt or "make it blue", defaults)
    i = cfg.infer
    if parts.unet.config.in_channels != parts.config.channels:
        raise JobConfigError(
            f"{STAGE}.model.restore_from_path={cfg.model.restore_from_path!r}: an InstructPix2Pix model; "
            "export it with export=instruct_pix2pix/export_instruct_pix2pix"
        )
    if i.down_factor != factor:
        raise JobConfigError(
            f"{STAGE}.infer.down_factor={i.down_factor}: this model's VAE maps {factor} pixels to one "
            f"latent; set {factor}"
        )
    for name in ("height", "width"):
        if getattr(i, name) % multiple:
            raise JobConfigError(
                f"{STAGE}.infer.{name}={getattr(i, name)}: this model needs image sides that are "
                f"multiples of {multiple}"
            )
    defaults = {
        "seed": i.seed,
        "unconditional_guidance_scale": i.unconditional_guidance_scale,
        "inference_steps": i.inference_steps,
        "eta": i.eta,
        "sampler_type": i.sampler_type,
    }
    return Task(False, i.num_images_per_prompt, i.height, i.width, (i.prompts or ["a photo"])[0], defaults)


def export(cfg):
    import torch

    from ..vision.export import GraphMismatch, export_folders, finish_export, settings_yaml
    from ..vision.onnx_graphs import check_graph
    from ..vision.triton_entries import copy_entry
    from .model import load_stable_diffusion
    from .onnx_graphs import GRAPH_FILES, export_fixed, pipeline_graphs
    from .sampling import vae_factor

    if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
        raise JobConfigError(
            f"{STAGE}.trainer.accelerator=gpu: CUDA is not available on this machine; set "
            f"{STAGE}.trainer.accelerator=cpu (TensorRT engines are then not built)"
        )
    parts = load_stable_diffusion(cfg.model.restore_from_path)  # fp32 graphs; engines take trainer.precision
    task = _task(cfg, parts)
    places = cfg.places
    out = Path(cfg.out_path)
    onnx_dir, plan_dir, repository = export_folders(out)
    factor = vae_factor(parts)
    graphs = pipeline_graphs(parts, task.images, (task.height // factor, task.width // factor), task.edit)
    differences = {}
    for graph in graphs:
        path = onnx_dir / f"{graph.name}.onnx"
        export_fixed(graph, str(path))
        differences[graph.name] = check_graph(graph, str(path), [graph.batch])
        if differences[graph.name] > places.check_tolerance:
            raise GraphMismatch(
                f"{path}: onnxruntime's output differs from the {GRAPH_FILES[graph.name]}'s by up to "
                f"{differences[graph.name]:.3g}, more than check_tolerance={places.check_tolerance}; "
                "nothing was served from it"
            )
    engines = _engines(cfg, graphs, onnx_dir, plan_dir)
    settings = _settings(cfg, parts, task, graphs, engines)
    (plan_dir / INFER_CONFIG_FILE).write_text(settings_yaml({k: v for k, v in settings.items() if k != "model"}))
    entry = _entry(repository, EDIT_MODEL if task.edit else SD_MODEL, parts, settings, graphs, onnx_dir, plan_dir)
    pipeline = _check_pipeline(parts, entry / "1", task)
    differences["pipeline"] = pipeline
    if pipeline > places.check_tolerance:
        raise GraphMismatch(
            f"{entry}: the pipeline on the graphs draws images that differ from the framework's by up "
            f"to {pipeline:.3g} (of 1), more than check_tolerance={places.check_tolerance}"
        )
    entries = [entry] + ([copy_entry(entry, Path(places.deployment_dir))] if places.deployment_dir else [])
    report = {
        "model": cfg.model.restore_from_path,
        "task": "edit" if task.edit else "text2img",
        "onnx": {g.name: str(onnx_dir / f"{g.name}.onnx") for g in graphs},
        "batch": {g.name: g.batch for g in graphs},
        "max_abs_difference": differences,
        "check_tolerance": places.check_tolerance,
    }
    return finish_export(
        out,
        report,
        engines,
        entries,
        f"{onnx_dir} ({', '.join(f'{g.name}.onnx [{g.batch}]' for g in graphs)}; "
        f"{task.images} images of {task.height}x{task.width} per request)",
        f" (tolerance {places.check_tolerance:g}; pipeline: {CHECK_STEPS} steps, images in [0, 1])",
        f"tritonserver --model-repository {repository} --model-control-mode=explicit --load-model {entry.name}",
    )


def _engines(cfg, graphs, onnx_dir: Path, plan_dir: Path) -> dict:
    from ..vision.export import fixed_generator
    from ..vision.tensorrt_engines import build_engine, unavailable

    reason = unavailable()
    if reason is not None:
        return {"built": {}, "reason": reason + "; the Triton entry runs the ONNX graphs under onnxruntime"}
    built = {}
    for graph in graphs:
        path = plan_dir / f"{graph.name}.plan"
        generator = fixed_generator()
        shapes = {name: tuple(make(graph.batch, generator).shape) for name, make in graph.inputs.items()}
        build_engine(
            str(onnx_dir / f"{graph.name}.onnx"),
            str(path),
            {n: (s, s, s) for n, s in shapes.items()},
            fp16=cfg.trainer.dtype() == "fp16",
        )
        built[graph.name] = str(path)
    return {"built": built, "reason": None}


def _settings(cfg, parts, task: Task, graphs, engines) -> dict:
    from .model import stored_config
    from .onnx_parts import network_settings

    return {
        "task": "edit" if task.edit else "text2img",
        "num_images_per_prompt": task.images,
        "height": task.height,
        "width": task.width,
        "precision": cfg.trainer.dtype() or "fp32",
        "defaults": task.defaults,
        "onnx": [f"{g.name}.onnx" for g in graphs],
        "engines": sorted(Path(p).name for p in engines["built"].values()),
        "model": stored_config(parts.config, parts.text_encoder),
        **network_settings(parts),
    }


def _entry(repository: Path, name: str, parts, settings: dict, graphs, onnx_dir: Path, plan_dir: Path) -> Path:
    """<repository>/<name>: config.pbtxt (backend python) and 1/ with model.py, the graphs, the engines, the
    settings and the tokenizer's files, swapped in when complete."""
    from ..serving.triton_export import parameter_pbtxt, tensors_pbtxt
    from ..vision.triton_entries import swap_in_entry
    from .onnx_parts import SETTINGS_FILE
    from .serving import EDIT_INPUTS, TEXT2IMG_INPUTS, output_spec

    files = {"model.py": Path(__file__).with_name("triton_model.py"), INFER_CONFIG_FILE: plan_dir / INFER_CONFIG_FILE}
    files.update({f"{g.name}.onnx": onnx_dir / f"{g.name}.onnx" for g in graphs})
    files.update({engine: plan_dir / engine for engine in settings["engines"]})
    tokenizer = parts.config.tokenizer
    files.update({Path(f).name: Path(f) for f in tokenizer.files()})
    inputs = EDIT_INPUTS if settings["task"] == "edit" else TEXT2IMG_INPUTS
    outputs = (output_spec(settings["num_images_per_prompt"], settings["height"], settings["width"]),)
    launcher_path = str(Path(__file__).resolve().parents[3])  # the folder holding the nemo_launcher package
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        "max_batch_size: 0",
        *tensors_pbtxt(inputs, outputs),
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        parameter_pbtxt("launcher_path", launcher_path),
    ]
    return swap_in_entry(
        repository / name, files, "\n".join(lines) + "\n", {SETTINGS_FILE: json.dumps(settings, indent=1)}
    )


def _check_pipeline(parts, version_dir: Path, task: Task) -> float:
    """Largest |graphs - networks| over the images the whole pipeline draws from one seed, in [0, 1]."""
    import torch

    from .onnx_parts import onnx_parts
    from .sampling import Sampling, edit_image, text_to_images

    served = onnx_parts(version_dir)
    results: list[torch.Tensor] = []
    for pipeline in (parts, served):
        generator = torch.Generator().manual_seed(task.defaults["seed"])
        if task.edit:
            pixels = torch.rand(1, 3, task.height, task.width, generator=torch.Generator().manual_seed(0)) * 2 - 1
            results.append(
                edit_image(
                    pipeline,
                    pixels,
                    task.prompt,
                    CHECK_STEPS,
                    task.defaults["cfg_text"],
                    task.defaults["cfg_image"],
                    task.images,
                    generator,
                )
            )
        else:
            sampling = Sampling(CHECK_STEPS, task.defaults["sampler_type"], task.defaults["eta"])
            results.append(
                text_to_images(
                    pipeline,
                    [task.prompt],
                    sampling,
                    task.defaults["unconditional_guidance_scale"],
                    task.images,
                    task.height,
                    task.width,
                    generator,
                )
            )
    return float((results[0] - results[1]).abs().max())


def run(argv, schema) -> int:
    from ..vision.saved_model_job import run_saved_model_job

    return run_saved_model_job(argv, PROG, schema, STAGE, export)


def main(argv=None) -> int:
    """The schema follows the config's section: an `edit:` section is InstructPix2Pix's."""
    from ..common.config import config_path_from_argv, load_resolved_config

    try:
        section = load_resolved_config(config_path_from_argv(argv, prog=PROG))
    except JobConfigError:
        section = {}  # run() reports the same error in the job's own way
    return run(argv, EditExportConfig if "edit" in section else SdExportConfig)


if __name__ == "__main__":
    sys.exit(main())
