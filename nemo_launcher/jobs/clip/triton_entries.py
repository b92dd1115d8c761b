"""CLIP's Triton entries, written by the vision export (vision/export.py) through CLIP's record (vision_family.py):

<model_repo>/clip_vision_trt   the image tower's engine or ONNX graph (Triton's own backend)
<model_repo>/clip_trt          a Python backend (triton_clip_model.py) scoring captions against images with the
                               text graph, the tokenizer files and the learned temperature
"""

import json
from collections.abc import Mapping
from pathlib import Path

from ...contract.schemas.vision_export import CLIP_MODEL, CLIP_VISION_MODEL
from ..serving.triton_export import parameter_pbtxt, tensors_pbtxt
from ..vision.export import tensor_specs
from ..vision.triton_entries import swap_in_entry, write_graph_entry
from .serving import SETTINGS_FILE, TEXT_GRAPH, clip_tensors


def triton_entries(cfg, saved, graphs, model_file, onnx_dir: Path, repository: Path, settings: dict) -> list[Path]:
    graph = graphs["clip_vision"]
    entries = [
        write_graph_entry(
            repository, CLIP_VISION_MODEL, model_file(graph), *tensor_specs(saved, graph), cfg.infer.max_batch_size
        )
    ]
    tokenizer = saved.model_config.tokenizer
    scorer = {
        "text_length": cfg.infer.max_text,
        "logit_scale": settings["logit_scale"],
        "max_batch_size": cfg.infer.max_batch_size,
        "tokenizer_library": tokenizer.library,
    }
    launcher_path = str(Path(__file__).resolve().parents[3])  # the folder holding the nemo_launcher package
    entries.append(
        write_clip_entry(
            repository,
            CLIP_MODEL,
            CLIP_VISION_MODEL,
            onnx_dir / "clip_text.onnx",
            scorer,
            {"vocab_file": tokenizer.vocab_file, "merge_file": tokenizer.merge_file},
            saved.image_size,
            launcher_path,
        )
    )
    return entries


def write_clip_entry(
    repository: Path,
    name: str,
    vision_model: str,
    text_graph: Path,
    settings: dict,
    tokenizer_files: Mapping[str, str | None],
    image_size,
    launcher_path: str,
) -> Path:
    """clip_trt: a Python backend model (triton_clip_model.py) with the text graph, its settings and the tokenizer
    files; settings name the files by their name inside the version folder."""
    inputs, outputs = clip_tensors(*image_size)
    template = Path(__file__).with_name("triton_clip_model.py")
    files = {"model.py": template, TEXT_GRAPH: text_graph}
    names = {}
    for key, path in tokenizer_files.items():
        names[key] = Path(path).name if path else None
        if path:
            files[Path(path).name] = Path(path)
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        "max_batch_size: 0",
        *tensors_pbtxt(inputs, outputs),
        parameter_pbtxt("launcher_path", launcher_path),
        parameter_pbtxt("vision_model", vision_model),
    ]
    return swap_in_entry(
        repository / name,
        files,
        "\n".join(lines) + "\n",
        {SETTINGS_FILE: json.dumps({**settings, "tokenizer_files": names}, indent=1)},
    )
