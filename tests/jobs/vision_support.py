"""Support for the ViT and CLIP job tests: the generated coloured shapes as class folders and as image-caption
WebDataset tars, resolved tiny configs, and a training program started, killed and rerun.

    write_shape_tars(folder, examples=192, per_tar=48)      # what multimodal/tiny_shapes' reorganize_tar writes
    config = write_config(work, data_dir, "clip/tiny", ["trainer.max_steps=12"])
"""
import io
import os
import subprocess
import time
from pathlib import Path
from typing import Sequence

from nemo_launcher.jobs.multimodal.shapes import shape_example
from nemo_launcher.jobs.multimodal.tars import AtomicTar

from .gpt_train_support import REPO, command, environment, losses, run_training, weights

__all__ = ["REPO", "losses", "run_training", "weights", "write_shape_tars", "write_config", "log_dir", "kill_after_checkpoint"]


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

    return write_stage_config(work / "cfg.yaml", "training", choice, data_dir=data_dir, base_results_dir=work / "results",
                              overrides=list(overrides))


def log_dir(work: Path, run_name: str) -> Path:
    return work / "results" / run_name / "results"


def kill_after_checkpoint(config: Path, program: str, checkpoint: Path, output: Path, later: Path) -> None:
    """Starts the program, SIGKILLs it once `checkpoint` is complete, and checks `later` was not written yet."""
    with open(output, "w") as handle:
        process = subprocess.Popen(command(config, program=(program,)), cwd=REPO, env=environment(), stdout=handle,
                                   stderr=subprocess.STDOUT, text=True)
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
