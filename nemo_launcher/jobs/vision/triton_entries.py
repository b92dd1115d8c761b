"""The Triton model repository entries of the vision export, named as the seed's deployment step names them.

    write_graph_entry(repo, "vit_trt", model_file, inputs, outputs, max_batch_size=64)   # .plan or .onnx
    write_clip_entry(repo, "clip_trt", text_graph, settings, tokenizer_files, image_size)
    copy_entry(repo / "vit_trt", Path("deployment/server"))                                # the seed's place

    <repo>/vit_trt/config.pbtxt            platform tensorrt_plan (an engine was built) or onnxruntime_onnx
    <repo>/vit_trt/1/model.plan|model.onnx
    <repo>/clip_trt/config.pbtxt           backend python; asks clip_vision_trt for the image's features (BLS)
    <repo>/clip_trt/1/{model.py, clip_text.onnx, clip_serving.json, tokenizer files}

Each entry is built beside its final place and swapped in when complete, so a server never sees half of one.
"""

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..serving.triton_export import VERSION, tensors_pbtxt

PLATFORMS = {".plan": "tensorrt_plan", ".onnx": "onnxruntime_onnx"}


def swap_in_entry(target: Path, files: Mapping[str, Path], config: str, texts: Mapping[str, str] | None = None) -> Path:
    """files: version-folder name -> file copied there; texts: version-folder name -> content written there."""
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / VERSION).mkdir(parents=True)
    for name, source in files.items():
        shutil.copyfile(source, staging / VERSION / name)
    for name, content in (texts or {}).items():
        (staging / VERSION / name).write_text(content)
    (staging / "config.pbtxt").write_text(config)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def write_graph_entry(
    repository: Path, name: str, model_file: Path, inputs: Sequence, outputs: Sequence, max_batch_size: int
) -> Path:
    """An engine or an ONNX graph served by Triton's own backend for it, batches of 1..max_batch_size."""
    platform = PLATFORMS[model_file.suffix]
    lines = [
        f'name: "{name}"',
        f'platform: "{platform}"',
        f"max_batch_size: {max_batch_size}",
        *tensors_pbtxt(inputs, outputs),
    ]
    return swap_in_entry(repository / name, {f"model{model_file.suffix}": model_file}, "\n".join(lines) + "\n")


def copy_entry(entry: Path, deployment: Path) -> Path:
    """A copy of a written entry in another repository (the seed's deployment/server), swapped in whole."""
    deployment.mkdir(parents=True, exist_ok=True)
    target = deployment / entry.name
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(entry, staging)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
