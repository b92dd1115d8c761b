"""The code a run trained with, recorded as `<run.results_dir>/git_log.txt` (the reference writes the same file).

    write_code_versions(Path(cfg.run.results_dir))     # rank 0, when the trainer starts

Holds the launcher's commit and its last commits (when the code is a git checkout), the container's NGC PyTorch
release, and the versions of Python and of the packages the trainer runs on. Each attempt of a run rewrites it, so
it describes the newest attempt: a requeue in a newer container shows there.
"""

import contextlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "torch",
    "megatron-core",
    "pytorch-lightning",
    "transformer-engine",
    "transformer_engine_torch",
    "apex",
    "numpy",
)
FILE_NAME = "git_log.txt"


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def code_versions() -> list[str]:
    root = Path(__file__).resolve().parents[3]
    lines = [f"launcher: {root}"]
    commit = _git(root, "rev-parse", "HEAD")
    if commit:
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
        lines.append(f"commit: {commit}{' (with uncommitted changes)' if dirty else ''}")
        lines += ["recent commits:"] + [
            f"  {line}" for line in _git(root, "log", "-n", "5", "--format=%h %s").splitlines()
        ]
    else:
        lines.append("commit: unknown (not a git checkout)")
    lines.append(f"NGC PyTorch container: {os.environ.get('NVIDIA_PYTORCH_VERSION', 'none')}")
    lines.append(f"python: {platform.python_version()}")
    for name in PACKAGES:
        try:
            lines.append(f"{name}: {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    # torch only where installed: the module itself stays importable without it (standard library only above).
    with contextlib.suppress(ImportError):
        import torch

        lines.append(f"CUDA: {torch.version.cuda or 'none'}")
        if torch.cuda.is_available():
            lines.append(f"NCCL: {'.'.join(map(str, torch.cuda.nccl.version()))}")
    return lines


def write_code_versions(results_dir: Path) -> Path:
    path = Path(results_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text("\n".join(code_versions()) + "\n")
    os.replace(temporary, path)
    return path
