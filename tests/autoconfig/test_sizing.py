"""Model size from a budget and days for a size: the seed's example, its inverse and mT5's penalty."""

import pytest

from nemo_launcher.launch.autoconfig.sizing import days_to_train, recommend_size, trainable_parameters

from .support import run_autoconfig

SEED_EXAMPLE = {"gpus": 20 * 8, "days": 5, "tokens_in_b": 300, "tflops_per_gpu": 140}


def test_the_seed_example_recommends_5b():
    """Seed 001, 5.3.1.1: 20 DGX nodes (80 GB), at most 5 days, GPT -> a 5B model."""
    advice = recommend_size("gpt3", **SEED_EXAMPLE)
    # 5 days x 86400 s x 160 GPUs x 140e12 FLOP/s / (6 x 300e9 tokens) = 5.376e9 parameters.
    assert advice.budget_in_b == 5.38
    assert advice.size_in_b == 5.0


def test_days_for_a_size_is_the_inverse():
    days = days_to_train("gpt3", 5.0, gpus=160, tokens_in_b=300, tflops_per_gpu=140)
    assert days == pytest.approx(5.0 * 5.0 / 5.376, rel=1e-3)  # 4.65 days
    budget = trainable_parameters("gpt3", 160, days, 300, 140)
    assert budget == pytest.approx(5.0)


def test_mt5_penalty_shrinks_the_size_and_stretches_the_days():
    assert trainable_parameters("mt5", 160, 5, 300, 140) == pytest.approx(0.87 * 5.376, rel=1e-3)
    assert days_to_train("mt5", 3.2, 160, 1000, 140) == pytest.approx(1.15 * days_to_train("t5", 3.2, 160, 1000, 140))


def test_a_budget_below_every_size_gets_the_smallest():
    assert recommend_size("bert", gpus=1, days=0.01, tokens_in_b=1800, tflops_per_gpu=100).size_in_b == 0.11


def test_unknown_size_on_the_seed_example_recommends_5b_and_writes_its_base_config(tmp_path, capsys):
    """`search_config=gpt3/unknown_size` with the seed's 20 nodes and 5 days (its defaults)."""
    results = tmp_path / "results"
    code, out, err = run_autoconfig(
        [
            "search_config=gpt3/unknown_size",
            "run_training_hp_search=False",
            "run_inference_hp_search=False",
            f"base_results_dir={results}",
        ],
        capsys,
    )
    assert code == 0, err
    assert "Recommended model size: 5b (20 nodes x 8 GPUs at 140 TFLOPS train 5.38B parameters" in out
    base = results / "gpt3" / "unknown_size_80gb" / "base_cfg_5b.yaml"
    assert base.exists() and "num_layers: 24" in base.read_text() and "hidden_size: 4096" in base.read_text()
    assert err == ""
