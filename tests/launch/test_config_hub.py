"""Every shipped stage config composes, validates and renders on every backend (never run here)."""
import subprocess
from pathlib import Path

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT

CONF = REPO_ROOT / "conf"
TRAINING = sorted(str(p.relative_to(CONF / "training").with_suffix("")) for p in (CONF / "training").rglob("*.yaml"))


def test_the_seed_gpt_configs_are_all_there():
    expected = {"126m", "400m_improved", "1b_improved", "5b", "7b_improved", "20b", "40b", "40b_improved", "175b", "tiny"}
    assert expected <= {name.split("/")[1] for name in TRAINING if name.startswith("gpt3/")}


CLUSTER_TYPES = ("bcm", "bcp", "interactive")

# The shipped configs the launcher refuses on purpose: (training config, cluster_type) -> words the one-line
# error must hold. On interactive (one node of 8 GPUs) a model parallel group larger than 8 cannot fit.
REFUSED = {
    ("gpt3/175b", "interactive"): ("training.model.tensor_model_parallel_size=8", "TP(8) x PP(16) = 128",
                                   "does not divide nodes(1) x devices(8) = 8"),
    ("gpt3/40b_improved", "interactive"): ("training.model.tensor_model_parallel_size=8", "TP(8) x PP(2) = 16",
                                           "does not divide nodes(1) x devices(8) = 8"),
}


def _launch_training(launch, choice, cluster_type, results):
    overrides = ["stages=[training]", f"training={choice}", f"cluster_type={cluster_type}"]
    if cluster_type == "interactive":
        overrides.append("training.trainer.num_nodes=1")  # interactive runs on one machine
    return launch(overrides, results=results)


@pytest.mark.parametrize("choice, cluster_type",
                         [(c, t) for c in TRAINING for t in CLUSTER_TYPES if (c, t) not in REFUSED])
def test_training_config_renders(choice, cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = _launch_training(launch, choice, cluster_type, results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    (config,) = results.rglob("*_hydra.yaml")
    text = config.read_text()
    assert "${" not in text and "???" not in text


@pytest.mark.parametrize("choice, cluster_type", sorted(REFUSED))
def test_refused_on_purpose(choice, cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = _launch_training(launch, choice, cluster_type, results)
    assert code == 2, f"{choice} on {cluster_type} should be refused as a config error (exit 2), got {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    for words in REFUSED[choice, cluster_type]:
        assert words in lines[0], f"expected {words!r} in: {lines[0]}"
    assert not list(results.rglob("*_submission.sh")), "a refused config must write no script"


@pytest.mark.parametrize("choice", [c for c in TRAINING if c != "gpt3/tiny"])
def test_gpu_configs_ask_for_what_the_seed_says(choice, launch, tmp_path):
    import yaml

    results = tmp_path / "results"
    assert launch(["stages=[training]", f"training={choice}"], results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    resolved = yaml.safe_load(config.read_text())
    (script,) = results.rglob("*_submission.sh")
    text = script.read_text()
    assert f"#SBATCH --nodes={resolved['trainer']['num_nodes']}\n" in text
    assert "#SBATCH --ntasks-per-node=8\n" in text and "#SBATCH --gpus-per-node=8\n" in text
    assert resolved["trainer"]["precision"] == "bf16"


# config: (layers, hidden, heads, TP, PP, nodes, global batch, micro batch), from the seed's GPT table.
SEED_GPT = {
    "126m": (12, 768, 12, 1, 1, 8, 256, 4),
    "400m_improved": (24, 1024, 16, 1, 1, 8, 256, 4),
    "1b_improved": (24, 2048, 16, 1, 1, 8, 512, 2),
    "5b": (24, 4096, 32, 1, 1, 16, 2048, 4),
    "7b_improved": (32, 4096, 32, 2, 1, 16, 512, 1),
    "20b": (44, 6144, 48, 4, 1, 64, 2048, 4),
    "40b": (48, 8192, 64, 8, 1, 128, 2048, 4),
    "40b_improved": (48, 8192, 64, 8, 2, 96, 1536, 1),
    "175b": (96, 12288, 96, 8, 16, 128, 2048, 1),
}


@pytest.mark.parametrize("size", sorted(SEED_GPT))
def test_gpt_sizes_match_the_seed(size, launch, tmp_path):
    import yaml

    results = tmp_path / "results"
    assert launch(["stages=[training]", f"training=gpt3/{size}"], results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    c = yaml.safe_load(config.read_text())
    m = c["model"]
    got = (m["num_layers"], m["hidden_size"], m["num_attention_heads"], m["tensor_model_parallel_size"],
           m["pipeline_model_parallel_size"], c["trainer"]["num_nodes"], m["global_batch_size"], m["micro_batch_size"])
    assert got == SEED_GPT[size]
    assert m["encoder_seq_length"] == 2048
    if size.endswith("_improved"):
        assert (m["activation"], m["position_embedding_type"], m["hidden_dropout"], m["bias"],
                m["share_embeddings_and_output_weights"]) == ("fast-swiglu", "rope", 0.0, False, False)


STAGE_GROUPS = ("data_preparation", "training", "conversion", "fine_tuning", "peft", "evaluation", "export")
EVERY_CONFIG = sorted((group, str(path.relative_to(CONF / group).with_suffix("")))
                      for group in STAGE_GROUPS for path in (CONF / group).rglob("*.yaml"))
# Shipped configs that ask the user for a value (`???` or an empty list) and say which: config -> key in the error.
ASKS_FOR = {
    ("fine_tuning", "gpt3/custom_task"): "fine_tuning.model.data.train_ds.file_names",
    ("data_preparation", "generic/custom_dataset"): "data_preparation.raw_dataset_files",
}


@pytest.mark.parametrize("group, choice", EVERY_CONFIG, ids=[f"{g}={c}" for g, c in EVERY_CONFIG])
def test_every_shipped_config_of_every_stage_binds(group, choice, launch, tmp_path):
    """Each config binds to its job program's schema as shipped (a dry run binds every selected stage)."""
    results = tmp_path / "results"
    code, out, err = launch([f"stages=[{group}]", f"{group}={choice}"], results=results)
    if (group, choice) in ASKS_FOR:
        assert code == 2 and ASKS_FOR[group, choice] in err, err
    else:
        assert code == 0, err
        assert list(results.rglob("*_hydra.yaml")), "the resolved config was written"
