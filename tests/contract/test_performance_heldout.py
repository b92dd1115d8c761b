"""The seed's published training throughput as a held-out check of the performance model: nothing in the model is
fitted to these numbers. Each point is predicted from the shipped config the seed's table describes, with the
table's node count (and batch, where the table gives one), on the seed's DGX A100 80GB nodes.

    python3 -m pytest -s tests/contract/test_performance_heldout.py    # prints every point's error and the mean

Sources (seed 001, section 7): the GPT 5B and 175B scaling tables (7.1.2), T5 3B (7.2.2), mT5 3B (7.3.2), BERT 4B
(7.4.2), and the convergence tables' throughput column (7.1.1 GPT 5B: 160 GPUs, global batch 1440, TP 2 and micro
batch 2 as the seed's section 5.7 runs it; 7.2.1 T5 220M and 3B; 7.3.1 mT5 170M, 390M and 3B; 7.4.1 BERT 4B, whose
"16 GPUs" equals the 16-node scaling point). Two architectures are taken as the seed's size names say rather than as
the shipped files have them, because the shipped files are not the models the seed measured: bert/4b with GeLU
(the family's GeGLU makes it 5.1B parameters; GeLU gives 3.87B) and mt5/390m with 12 layers of width 768 (the
shipped 8 x 512 has 217M parameters; 12 x 768 has 391M). The 175B table starts at 8 nodes, fewer GPUs than the
shipped TP 8 x PP 16: that point runs PP 8 with 12 virtual stages (our assumption; the seed gives no layout).
"""

import pytest

from nemo_launcher.contract.performance import estimate_job
from nemo_launcher.launch.stage_config import stage_config

# The mean absolute error this model reached when the tables were first predicted, 27.4% (docs/performance-model.md);
# a change that makes the predictions worse fails here. The goal is 0.20.
MEAN_ABSOLUTE_ERROR_BOUND = 0.28

SEED_CONFIG_FIXES = {
    "bert/4b": ["model.activation=gelu"],
    "mt5/390m": ["model.encoder_num_layers=12", "model.hidden_size=768"],
}
_SCALING = [
    ("gpt3/5b", dict(zip((1, 2, 4, 8, 16, 32), (40345, 79815, 161754, 312774, 659481, 1159288)))),
    ("gpt3/175b", dict(zip((8, 16, 32, 64, 128), (7500, 14950, 29537, 58211, 109684)))),
    ("t5/3b", dict(zip((1, 2, 4, 5, 10, 20), (110769, 215579, 417644, 515100, 957506, 1626353)))),
    ("mt5/3b", dict(zip((1, 2, 4, 5, 10, 20), (91166, 179583, 346263, 429088, 798570, 1303767)))),
    ("bert/4b", dict(zip((1, 2, 4, 8, 16), (57287, 108695, 215358, 393167, 728178)))),
]
# (config, nodes, tokens/s, changes to the model section)
POINTS = [(config, nodes, tokens, {}) for config, table in _SCALING for nodes, tokens in table.items()]
POINTS[6] = ("gpt3/175b", 8, 7500, {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 12})
POINTS += [
    ("gpt3/5b", 20, 726384, {"global_batch_size": 1440, "micro_batch_size": 2, "tensor_model_parallel_size": 2}),
    ("t5/220m", 4, 3273728, {}),
    ("t5/3b", 20, 1395131, {}),
    ("mt5/170m", 4, 4112062, {}),
    ("mt5/390m", 8, 3744914, {}),
    ("mt5/3b", 20, 911065, {}),
]


@pytest.fixture(scope="module")
def seed_configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("heldout")
    names = sorted({config for config, *_ in POINTS})
    return {
        name: stage_config("training", name, root / "data", root / "results", SEED_CONFIG_FIXES.get(name, ()))
        for name in names
    }


def predicted_tokens_per_s(config: dict, nodes: int, model_changes: dict) -> float:
    stage = {**config, "trainer": {**config["trainer"], "num_nodes": nodes}}
    stage["model"] = {**config["model"], **model_changes}
    return estimate_job(stage, "a100-80gb").tokens_per_s


def test_the_seed_throughput_tables_are_predicted_within_the_recorded_error(seed_configs):
    assert POINTS[6][1] == 8 and len(POINTS) == 34
    rows, errors = [], []
    for config, nodes, published, changes in POINTS:
        predicted = predicted_tokens_per_s(seed_configs[config], nodes, changes)
        error = (predicted - published) / published
        errors.append(abs(error))
        rows.append(f"{config:10} {nodes:4} nodes  seed {published:>10,}  predicted {predicted:>12,.0f}  {error:+7.1%}")
    mean = sum(errors) / len(errors)
    report = "\n".join([*rows, f"mean absolute error over {len(errors)} points: {mean:.1%}"])
    print("\n" + report)
    assert mean <= MEAN_ABSOLUTE_ERROR_BOUND, report
    # no point may be off by more than a factor of three either way: a unit slip shows up at once
    assert max(errors) < 2.0, report


def test_the_seed_sizes_come_out_of_the_configs_the_held_out_check_reads(seed_configs):
    """The held-out check predicts the models the seed names: their parameter counts match the names."""
    sizes = {"gpt3/5b": 5.0e9, "gpt3/175b": 175e9, "t5/3b": 2.8e9, "bert/4b": 3.9e9, "mt5/390m": 0.39e9}
    for config, size in sizes.items():
        parameters = estimate_job(seed_configs[config]).parameters
        assert parameters == pytest.approx(size, rel=0.05), config
