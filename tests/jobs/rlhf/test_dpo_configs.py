"""The shipped rlhf_dpo configs: conf/rlhf_dpo/gpt3/tiny.yaml and tiny_lora.yaml, composed by Hydra as the launcher
composes them (the tests' SFT policy and preference set in place of the pipeline's), run through the reference job
and the trainer on the CPU; 2b_dpo.yaml binds to the schema with its 8 x 8 layout.

OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_dpo_configs.py -q
"""

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nemo_launcher.contract.schemas.rlhf_dpo import DpoConfig
from nemo_launcher.launch.resolvers import REPO_ROOT

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..gpt_train_support import step_losses
from ..rlhf_support import preference_dir, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)
from .dpo_support import run_dpo, validation_figures


def _section(choice: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"rlhf_dpo=gpt3/{choice}", *overrides])
    return OmegaConf.to_container(cfg.rlhf_dpo, resolve=True)


def test_2b_dpo_binds_with_its_layout():
    section = _section("2b_dpo", "base_results_dir=/results", "data_dir=/data")
    cfg = DpoConfig.from_dict(section, "rlhf_dpo")
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.model.tensor_model_parallel_size) == (8, 8, 2)
    assert cfg.data_parallel_size(64) == 32
    # The training run it follows (gpt3/5b by default) sets the length.
    assert cfg.model.data.data_dir == "/data/rlhf/convert_comparisons" and cfg.model.data.max_seq_length == 2048
    assert cfg.model.restore_from_path == "/results/gpt3_2b/sft/results/checkpoints/megatron_gpt_sft.nemo"
    assert cfg.reference_writes() == ["/results/gpt3_2b/rlhf_dpo/reference"]


@pytest.mark.parametrize("choice, accuracy", [("tiny", 0.9), ("tiny_lora", 0.85)])
def test_tiny_configs_run_the_reference_job_and_dpo(choice, accuracy, rlhf_sft_nemo, preference_dir, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    (data / "rlhf").mkdir(parents=True)
    (data / "rlhf" / "tiny_preferences").symlink_to(preference_dir)
    section = _section(
        choice,
        f"base_results_dir={tmp_path / 'results'}",
        f"data_dir={data}",
        f"rlhf_dpo.model.restore_from_path={rlhf_sft_nemo}",
        "rlhf_dpo.trainer.log_every_n_steps=1",
    )
    cfg = DpoConfig.from_dict(section, "rlhf_dpo")
    work = tmp_path / "results"
    run_dpo("rlhf_dpo_reference", section, work)
    stdout = run_dpo("rlhf_dpo", section, work).stdout
    assert step_losses(stdout)[1]["preference_loss"] == pytest.approx(math.log(2), abs=1e-4)
    last = validation_figures(stdout)[cfg.trainer.max_steps]
    print(f"{choice}: held-out preference accuracy {last['preference_accuracy']:.4f} (chance 0.5)")
    assert last["preference_accuracy"] >= accuracy
    assert Path(cfg.policy_path()).is_file()
