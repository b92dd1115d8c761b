"""Data steps read the data_preparation section as the schema bound it (StepConfig.bound), and the family entry
modules (core/entry.py) name their heavy pieces without importing them."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from nemo_launcher.contract.schemas.data_preparation import DownloadSection, PileConfig
from nemo_launcher.jobs.data.pile_layout import fetch_policy, shard_job, tokenizer_spec
from nemo_launcher.jobs.steps.config import DataConfigError, StepConfig
from nemo_launcher.jobs.steps.fetch import FetchPolicy
from tests.launch.conftest import compose_config


def _pile_section(*overrides: str) -> dict:
    cfg, _ = compose_config(["stages=[data_preparation]", "data_preparation=gpt3/tiny_pile", *overrides])
    return OmegaConf.to_container(cfg.data_preparation, resolve=True)


def test_steps_read_typed_values_and_the_schema_defaults():
    section = _pile_section()
    section.pop("download", None)  # absent: the schema's DownloadSection defaults apply
    section["chunk_size_mb"] = 2
    cfg = StepConfig(section)
    assert isinstance(cfg.bound, PileConfig)
    assert fetch_policy(cfg) == FetchPolicy(progress=cfg.bound.progress)
    assert (FetchPolicy().retries, FetchPolicy().timeout_s, FetchPolicy().backoff_s) == (
        DownloadSection.retries,
        DownloadSection.timeout_s,
        DownloadSection.backoff_s,
    )
    job = shard_job(cfg, "in.jsonl", "out")
    assert job.chunk_bytes == 2 << 20 and job.json_key == cfg.bound.json_key
    spec = tokenizer_spec(cfg)
    assert (spec.library, spec.vocab_file, spec.merge_file) == (
        cfg.bound.tokenizer_library,
        cfg.bound.vocab_file,
        cfg.bound.merge_file,
    )


def test_configured_download_settings_reach_the_fetch_policy():
    section = _pile_section()
    section["download"] = {"retries": 1, "timeout_s": 7.5, "backoff_s": 0}
    policy = fetch_policy(StepConfig(section))
    assert (policy.retries, policy.timeout_s, policy.backoff_s) == (1, 7.5, 0)


def test_a_bad_value_is_refused_by_the_binding_with_its_key():
    section = _pile_section()
    section["chunk_size_mb"] = "big"
    with pytest.raises(DataConfigError, match=r"^data_preparation\.chunk_size_mb='big': expected a number$"):
        _ = StepConfig(section).bound


def test_entry_modules_defer_the_recipe_and_torch():
    code = (
        "import sys\n"
        "from nemo_launcher.jobs.clip import train\n"
        "from nemo_launcher.jobs.bert import convert\n"
        "heavy = [m for m in ('torch', 'megatron', 'nemo_launcher.jobs.clip.recipe') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert train.main(['--config', '/nonexistent.yaml']) == 2\n"
        "assert 'nemo_launcher.jobs.clip.recipe' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "/nonexistent.yaml" in done.stderr
