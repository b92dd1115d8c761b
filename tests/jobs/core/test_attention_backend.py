"""megatron-core asserts that the NVTE_*_ATTN variables agree with its attention backend; the reference's GPT
environment exports NVTE_FUSED_ATTN=0, so the trainer picks the backend from that environment
(core/transformer.attention_backend). Without it, every GPT job launched with the family's env_vars stopped at
model construction."""

import pytest

from tests.conftest import require_module


@pytest.mark.parametrize(
    "use_te, environ, expected",
    [
        (False, {}, "local"),
        (False, {"NVTE_FUSED_ATTN": "0"}, "local"),  # the local spec has one attention, whatever is exported
        (True, {}, "auto"),
        (True, {"NVTE_FUSED_ATTN": "0"}, "flash"),  # the reference's GPT environment
        (True, {"NVTE_FLASH_ATTN": "0"}, "fused"),
        (True, {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0"}, "unfused"),
        (True, {"NVTE_FUSED_ATTN": "1"}, "auto"),
    ],
)
def test_backend_follows_the_exported_variables(use_te, environ, expected):
    require_module("megatron.core")
    from nemo_launcher.jobs.core.transformer import attention_backend

    assert attention_backend(use_te, environ).name == expected


_BUILD = """
from nemo_launcher.jobs.common.sample_data import gpt2_bpe_files
from tests.jobs.gpt_models import model_section, random_model
vocab, merges = gpt2_bpe_files()
model = random_model(model_section("classic", str(vocab), str(merges)))
print("built", type(model).__name__)
"""


def test_a_gpt_builds_and_runs_with_the_reference_environment():
    """The GPT family's env_vars (NVTE_FUSED_ATTN=0 among them), as the training script exports them."""
    require_module("megatron.core")
    import os
    import subprocess
    import sys

    from tests.jobs.gpt_train_support import REPO

    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
        NVTE_FUSED_ATTN="0",
        NVTE_ASYNC_AMAX_REDUCTION="1",
        NVTE_DP_AMAX_REDUCE_INTERVAL="0",
        NCCL_NVLS_ENABLE="0",
    )
    result = subprocess.run(
        [sys.executable, "-c", _BUILD], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "built GPTModel" in result.stdout
