"""benchmarks/gpu_check.py where there is no GPU: one clear line and exit 1; and the shapes it checks are the sizes it
names, predicted for the GPU it finds.

    python3 -m pytest tests/contract/test_performance_gpu_check.py
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from nemo_launcher.contract.performance import estimate_job
from nemo_launcher.launch.resolvers import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_it_says_so_in_one_line_and_exits_1():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "error"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert re.fullmatch(r"gpu_check: (CUDA is not available|torch is not installed)[^\n]*\n", done.stderr), done.stderr


def test_the_three_shapes_are_the_sizes_they_are_named(gpu_check):
    sizes = {"gpt-125m": 125e6, "gpt-350m": 350e6, "gpt-1.3b": 1.3e9}
    assert list(gpu_check.SHAPES) == list(sizes)
    for name, size in sizes.items():
        est = estimate_job(gpu_check.stage_section(name, 30), "h100-80gb")
        assert est.parameters == pytest.approx(size, rel=0.03), name
        assert est.fits and est.layout.devices == 1 and not est.layout.distributed_optimizer
    assert gpu_check.profile_for("NVIDIA H100 80GB HBM3", 79.1) == "h100-80gb"
    assert gpu_check.profile_for("NVIDIA H200", 139.8) == "h200-141gb"
    assert gpu_check.profile_for("NVIDIA A100-SXM4-40GB", 39.4) == "a100-40gb"
    assert gpu_check.profile_for("NVIDIA A100-SXM4-80GB", 79.2) == "a100-80gb"
