"""Export of a saved ViT or CLIP model, run by `python3 -m nemo_launcher.jobs.vit.export` and
`nemo_launcher.jobs.clip.export` (`--config <resolved export yaml>`; schemas: contract/schemas/vision_export.py).

    <infer.out_path>/onnx/vit.onnx | clip_vision.onnx, clip_text.onnx    fp32 graphs, batch 1..max_batch_size
    <infer.out_path>/plan/<graph>.plan                                    TensorRT engines, where TensorRT builds them
    <infer.out_path>/plan/infer_config.yaml                               the inference settings (served defaults)
    <infer.out_path>/model_repo/vit_trt | clip_vision_trt, clip_trt       Triton entries (triton_entries.py)
    <infer.out_path>/export_report.json                                   what was written and checked

Every graph is run under onnxruntime at batch 1 and at max_batch_size on the same random inputs as the framework
model (fp32); the largest difference is reported, and above infer.check_tolerance the job fails (exit 1) before
anything is served from it. Triton serves an engine where one was built, else the ONNX graph.
"""

import dataclasses
import json
from pathlib import Path

from ...contract.model_facts import facts_of_model
from ...contract.model_rules import check_image_sizes
from ...contract.schemas.vision_export import EXPORT_REPORT_FILE, INFER_CONFIG_FILE, STAGE
from ..common.report import JobFault


class GraphMismatch(JobFault):
    """An exported graph computes something else than the model under onnxruntime."""


def _check_sizes(cfg, saved) -> None:
    """The launcher's rule (contract/model_rules.py: image side and text length) against the model opened here,
    for a .nemo the launcher could not read or one replaced since the launch."""
    facts = facts_of_model(dataclasses.asdict(saved.model_config), cfg.model.restore_from_path)
    check_image_sizes(facts, STAGE, dataclasses.asdict(cfg))


def tensor_specs(saved, graph) -> tuple:
    """(inputs, outputs) of a graph's Triton entry."""
    from ..serving.text import TensorSpec

    height, width = saved.image_size
    if graph.name == "clip_text":
        inputs = (TensorSpec("tokens", "TYPE_INT64", (-1,)),)
    else:
        inputs = (TensorSpec("images", "TYPE_FP32", (3, height, width)),)
    width_out = saved.record.output_width(saved.model_config)
    return inputs, (TensorSpec(graph.output, "TYPE_FP32", (width_out,)),)


def _engines(cfg, graphs, onnx_dir: Path, plan_dir: Path, input_shapes) -> dict:
    from .tensorrt_engines import build_engine, unavailable

    reason = unavailable()
    if reason is not None:
        return {"built": {}, "reason": reason}
    built = {}
    for graph in graphs:
        path = plan_dir / f"{graph.name}.plan"
        profiles = {
            name: ((1, *shape), (cfg.infer.max_batch_size, *shape), (cfg.infer.max_batch_size, *shape))
            for name, shape in input_shapes[graph.name].items()
        }
        build_engine(str(onnx_dir / f"{graph.name}.onnx"), str(path), profiles, fp16=cfg.trainer.dtype() == "fp16")
        built[graph.name] = str(path)
    return {"built": built, "reason": None}


def export(cfg, family: str):
    from .onnx_graphs import check_graph, export_graph, model_graphs
    from .saved_model_job import load_for

    saved = load_for(cfg, family, STAGE, precision="fp32")  # the graphs are fp32; engines take trainer.precision
    _check_sizes(cfg, saved)
    out = Path(cfg.infer.out_path)
    onnx_dir, plan_dir, repository = export_folders(out)
    graphs = model_graphs(saved, cfg.infer.max_dim, getattr(cfg.infer, "max_text", 0))
    differences, input_shapes = {}, {}
    for graph in graphs:
        path = onnx_dir / f"{graph.name}.onnx"
        export_graph(graph, str(path))
        worst = check_graph(graph, str(path), sorted({1, cfg.infer.max_batch_size}))
        differences[graph.name] = worst
        if worst > cfg.infer.check_tolerance:
            raise GraphMismatch(
                f"{path}: onnxruntime's output differs from the model's by up to {worst:.3g}, more "
                f"than {STAGE}.infer.check_tolerance={cfg.infer.check_tolerance}; nothing was served from it"
            )
        input_shapes[graph.name] = {
            name: tuple(make(1, fixed_generator()).shape[1:]) for name, make in graph.inputs.items()
        }
    engines = _engines(cfg, graphs, onnx_dir, plan_dir, input_shapes)
    settings = _infer_settings(cfg, saved, graphs, engines)
    (plan_dir / INFER_CONFIG_FILE).write_text(settings_yaml(settings))
    entries = _repository(cfg, saved, graphs, engines, onnx_dir, repository, settings)
    report = {
        "model": cfg.model.restore_from_path,
        "family": family,
        "onnx": {g.name: str(onnx_dir / f"{g.name}.onnx") for g in graphs},
        "max_abs_difference": differences,
        "check_tolerance": cfg.infer.check_tolerance,
        "checked_batch_sizes": sorted({1, cfg.infer.max_batch_size}),
    }
    return finish_export(
        out,
        report,
        engines,
        entries,
        f"{onnx_dir} ({', '.join(f'{g.name}.onnx' for g in graphs)}; batch 1..{cfg.infer.max_batch_size})",
        f" (tolerance {cfg.infer.check_tolerance:g})",
    )


def export_folders(out: Path) -> tuple[Path, Path, Path]:
    """<out>/onnx, <out>/plan and <out>/model_repo, created: the graphs, the engines and inference settings, and
    the Triton entries of an export (this one's and the Stable Diffusion export's)."""
    folders = out / "onnx", out / "plan", out / "model_repo"
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


def finish_export(out: Path, report: dict, engines: dict, entries, onnx: str, check: str, serve: str | None = None):
    """Writes <out>/export_report.json, `report` followed by what every export built (the TensorRT engines, the model
    repository and its Triton entries), and returns the summary an export ends with: `onnx` says what graphs were
    written, `check` what the check of their max_abs_difference compared, `serve` (where given) how to serve it."""
    from ..common.report import Summary

    report = {
        **report,
        "tensorrt": engines,
        "model_repository": str(out / "model_repo"),
        "entries": [str(e) for e in entries],
    }
    (out / EXPORT_REPORT_FILE).write_text(json.dumps(report, indent=1))
    summary = Summary(f"export finished: {report['model']}")
    summary.add("onnx", onnx)
    summary.add(
        "onnx check",
        ", ".join(
            f"{name} max |onnxruntime - model| = {value:.2e}" for name, value in report["max_abs_difference"].items()
        )
        + check,
    )
    summary.add("tensorrt", ", ".join(engines["built"].values()) if engines["built"] else engines["reason"])
    summary.add("plan", out / "plan" / INFER_CONFIG_FILE)
    summary.add("triton entries", ", ".join(report["entries"]))
    if serve:
        summary.add("serve it with", serve)
    return summary.add("report", out / EXPORT_REPORT_FILE)


def fixed_generator():
    """The seeded generator of an export's check inputs."""
    import torch

    return torch.Generator().manual_seed(0)


def _infer_settings(cfg, saved, graphs, engines) -> dict:
    settings = {
        "family": saved.family,
        "max_batch_size": cfg.infer.max_batch_size,
        "max_dim": cfg.infer.max_dim,
        "precision": cfg.trainer.dtype() or "fp32",
        "image_mean": saved.mean,
        "image_std": saved.std,
        "onnx": [f"{g.name}.onnx" for g in graphs],
        "engines": sorted(Path(p).name for p in engines["built"].values()),
    }
    if saved.record.classifies:
        settings["class_names"] = saved.class_names
    if saved.record.reads_text:
        tokenizer = saved.model_config.tokenizer
        settings.update(
            max_text=cfg.infer.max_text, logit_scale=saved.logit_scale(), tokenizer_library=tokenizer.library
        )
    return settings


def settings_yaml(settings: dict) -> str:
    import yaml

    return yaml.safe_dump(settings, sort_keys=False)


def _repository(cfg, saved, graphs, engines, onnx_dir: Path, repository: Path, settings: dict) -> list[Path]:
    from .triton_entries import copy_entry

    def model_file(graph) -> Path:
        built = engines["built"].get(graph.name)
        return Path(built) if built else onnx_dir / f"{graph.name}.onnx"

    by_name = {graph.name: graph for graph in graphs}
    entries = saved.record.triton_entries(cfg, saved, by_name, model_file, onnx_dir, repository, settings)
    if cfg.infer.deployment_dir:
        entries += [copy_entry(entry, Path(cfg.infer.deployment_dir)) for entry in list(entries)]
    return entries


def run_vision_export(argv, prog: str, schema, family: str) -> int:
    import functools

    from .saved_model_job import run_saved_model_job

    return run_saved_model_job(argv, prog, schema, STAGE, functools.partial(export, family=family))
