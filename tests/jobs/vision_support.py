"""Support for the ViT and CLIP job tests: the generated coloured shapes as class folders and as image-caption
WebDataset tars, resolved tiny configs, and a training program started, killed and rerun.

    write_shape_tars(folder, examples=192, per_tar=48)      # what multimodal/tiny_shapes' reorganize_tar writes
    config = write_config(work, data_dir, "clip/tiny", ["trainer.max_steps=12"])
"""

import io
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from nemo_launcher.jobs.multimodal.shapes import shape_example
from nemo_launcher.jobs.multimodal.tars import AtomicTar

from . import warm_python
from .gpt_train_support import REPO, command, environment, losses, run_training, weights

__all__ = [
    "REPO",
    "losses",
    "run_training",
    "weights",
    "write_shape_tars",
    "write_config",
    "log_dir",
    "kill_after_checkpoint",
    "nemo_state",
    "load_in_process",
    "layers_stacked",
    "module_names",
]


def write_shape_tars(folder: Path, examples: int, per_tar: int, first: int = 0, seed: int = 0, size: int = 64) -> None:
    """Examples first.. of the shapes generator as <key>.jpg + <key>.txt tars of per_tar examples (the last shorter)."""
    os.makedirs(folder, exist_ok=True)
    for start in range(first, first + examples, per_tar):
        with AtomicTar(str(folder / f"{start // per_tar:05d}.tar")) as tar:
            for index in range(start, min(start + per_tar, first + examples)):
                image, caption, _ = shape_example(index, seed, size)
                encoded = io.BytesIO()
                image.save(encoded, format="JPEG", quality=95)
                tar.write({"__key__": f"{index:09d}", "jpg": encoded.getvalue(), "txt": caption.encode()})


def write_config(work: Path, data_dir: Path, choice: str, overrides: Sequence[str] = ()) -> Path:
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        work / "cfg.yaml",
        "training",
        choice,
        data_dir=data_dir,
        base_results_dir=work / "results",
        overrides=list(overrides),
    )


def log_dir(work: Path, run_name: str) -> Path:
    return work / "results" / run_name / "results"


def kill_after_checkpoint(config: Path, program: str, checkpoint: Path, output: Path, later: Path) -> None:
    """Starts the program, SIGKILLs it once `checkpoint` is complete, and checks `later` was not written yet."""
    with open(output, "w") as handle:
        process = subprocess.Popen(
            command(config, program=(program,), warm=False),
            cwd=REPO,
            env=environment(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 240
        while not (checkpoint / "COMPLETE").exists():
            assert process.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no {checkpoint} in time"
            time.sleep(0.02)
        process.kill()  # SIGKILL: nothing runs after this, not even our handlers
    finally:
        process.wait()
    assert not (later / "COMPLETE").exists(), "killed too late to test a resume"


def nemo_state(path: Path):
    """(model_config.yaml, TP=1 state dict) of a vision .nemo, read by the archive code alone (no model built)."""
    from nemo_launcher.jobs.core.nemo_archive import load_nemo

    return load_nemo(path)


_LOAD = """
import json, sys, torch
from nemo_launcher.jobs.common.quiet import start_job
start_job(0)
from nemo_launcher.jobs.vision.saved_models import load_vision_model
saved = load_vision_model(sys.argv[1])
images = torch.stack([saved.pixels(path) for path in sys.argv[2:]])
out = {"family": saved.family, "size": list(saved.image_size), "classes": saved.class_names, "mean": saved.mean}
if saved.family == "vit":
    out["logits"] = saved.classify(images).tolist()
else:
    out["image"] = saved.image_features(images).tolist()
    out["text"] = saved.text_features(["a red circle", "a blue square"]).tolist()
    out["scale"] = saved.logit_scale()
print(json.dumps(out))
"""


def load_in_process(nemo: Path, images: Sequence[Path]) -> dict:
    """What load_vision_model gives a consumer job, run in its own process (megatron's parallel state is global)."""
    import json

    result = subprocess.run(
        [warm_python.interpreter(), "-c", _LOAD, str(nemo), *map(str, images)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def layers_stacked(state: dict) -> dict:
    """A state dict as megatron-core's dist checkpoints name it: every `<stack>.layers.<n>.<name>` stacked into one
    `<stack>.layers.<name>` tensor (layer n at index n), so a .nemo compares with weights() of a checkpoint."""
    import re as _re

    import torch

    grouped, out = {}, {}
    for key, value in state.items():
        match = _re.fullmatch(r"(.*\.layers)\.(\d+)\.(.*)", key)
        if match:
            grouped.setdefault(f"{match.group(1)}.{match.group(3)}", {})[int(match.group(2))] = value
        else:
            out[key] = value
    for key, layers in grouped.items():
        out[key] = torch.stack([layers[n] for n in sorted(layers)])
    return out


def module_names(checkpoint_weights: dict) -> dict:
    """weights() of a checkpoint under the module's own names: megatron-core's GPT local layer (CLIP's text tower)
    saves its norms under Transformer Engine's fused names (linear_qkv.layer_norm_*, linear_fc1.layer_norm_*)."""
    renames = {
        "self_attention.linear_qkv.layer_norm_": "input_layernorm.",
        "mlp.linear_fc1.layer_norm_": "pre_mlp_layernorm.",
    }
    out = {}
    for key, value in checkpoint_weights.items():
        for fused, own in renames.items():
            key = key.replace(fused, own)
        out[key] = value
    return out
