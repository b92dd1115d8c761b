"""The DiT family at launch: its configs carry the seed's values and bind on every backend, a whole pipeline
(Energon data, training, sampling) chains without overrides, and what it cannot run is refused in one line."""

import subprocess

import pytest
import yaml

from nemo_launcher.launch.families import FAMILIES
from nemo_launcher.launch.stage_config import stage_config


def _training(choice, tmp_path, overrides=()):
    return stage_config("training", f"dit/{choice}", tmp_path / "data", tmp_path / "results", overrides)


# config: (layers, hidden, heads, TP, SP, CP, nodes, devices, global batch, micro batch, tokens per sample)
SEED = {
    "train_mock": (1, 1024, 16, 1, False, 1, 1, 8, 8, 1, 1024),  # the factory's devices='auto'
    "mock_dit7b_8k": (28, 3072, 24, 2, True, 1, 16, 8, 256, 1, 8192),
    "pretrain_xl": (28, 1152, 16, 1, False, 1, 1, 8, 256, 32, 256),
}


@pytest.mark.parametrize("choice", sorted(SEED))
def test_seed_configs_carry_the_seeds_values(choice, tmp_path):
    c = _training(choice, tmp_path)
    m = c["model"]
    assert (
        m["num_layers"],
        m["hidden_size"],
        m["num_attention_heads"],
        m["tensor_model_parallel_size"],
        m["sequence_parallel"],
        m["context_parallel_size"],
        c["trainer"]["num_nodes"],
        c["trainer"]["devices"],
        m["global_batch_size"],
        m["micro_batch_size"],
        m["data"]["seq_length"],
    ) == SEED[choice]
    # The seed's optimizer and run settings, common to every factory.
    assert (m["optim"]["name"], m["optim"]["lr"], m["optim"]["weight_decay"], m["optim"]["betas"]) == (
        "distributed_fused_adam",
        1.0e-4,
        0.0,
        [0.9, 0.999],
    )
    assert (c["trainer"]["precision"], c["trainer"]["gradient_clip_val"], c["trainer"]["log_every_n_steps"]) == (
        "bf16",
        1.0,
        1,
    )
    assert c["exp_manager"]["checkpoint_callback_params"] == {"every_n_train_steps": 1000, "save_top_k": 3}
    assert (m["cross_attention"], m["qk_layernorm"]) == (True, True)
    if choice == "mock_dit7b_8k":
        assert (
            m["activations_checkpoint_granularity"],
            m["activations_checkpoint_method"],
            m["activations_checkpoint_num_layers"],
        ) == ("full", "uniform", 1)
    assert m["data"]["data_type"] == ("energon" if choice == "pretrain_xl" else "mock")


RENDERED = [
    (choice, cluster_type)
    for choice in ("train_mock", "mock_dit7b_8k", "pretrain_xl", "tiny")
    for cluster_type in ("bcm", "bcp", "interactive")
    if (choice, cluster_type) != ("mock_dit7b_8k", "interactive")
]


@pytest.mark.parametrize("choice, cluster_type", RENDERED)
def test_every_training_config_renders(choice, cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[training]", f"training=dit/{choice}", f"cluster_type={cluster_type}", "check_inputs=false"],
        results=results,
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "nemo_launcher.jobs.dit.train" in script.read_text()


def test_a_dit_pipeline_chains_without_overrides(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation,training,fw_inference]",
            "data_preparation=dit/tiny_energon",
            "training=dit/tiny",
            "fw_inference=dit/sample_shapes",
            "cluster_type=interactive",
            f"data_dir={tmp_path / 'data'}",
        ],
        results=results,
    )
    assert code == 0, err
    configs = {path.parent.name: yaml.safe_load(path.read_text()) for path in results.rglob("*_hydra.yaml")}
    data, training, sample = configs["dit_tiny_energon"], configs["dit_tiny"], configs["sample"]
    assert data["output_dir"] == training["model"]["data"]["path"] == sample["reference_dir"]
    assert (data["image_size"], data["text_length"], data["text_embedding_dim"]) == (
        training["model"]["data"]["latent_shape"][2],
        training["model"]["data"]["text_length"],
        training["model"]["text_embedding_dim"],
    )
    assert sample["checkpoint_dir"] == training["exp_manager"]["explicit_log_dir"] + "/checkpoints"
    assert sample["training_config"] == str(results / "dit_tiny" / "dit_tiny_hydra.yaml")
    assert set(FAMILIES["dit"].programs) == {"data_preparation", "training", "fw_inference"}


REFUSED = [
    (
        ["model.pipeline_model_parallel_size=2"],
        "training.model.pipeline_model_parallel_size=2: DiT runs without pipeline",
    ),
    (
        ["model.data.seq_length=100"],
        "training.model.data.seq_length=100: latents [3, 1, 16, 16] in patches of 1x2x2 make 64",
    ),
    (["model.data.latent_shape=[3,1,15,16]"], "latent height 15 is not divisible by its patch size 2"),
    (
        ["trainer.limit_val_batches=2"],
        "training.trainer.limit_val_batches=2: an Energon dataset is read as one endless",
    ),
    (["model.context_parallel_size=2", "trainer.devices=2"], "context parallelism needs Transformer Engine attention"),
    (
        ["model.context_parallel_size=2", "trainer.devices=2", "model.transformer_engine=true"],
        "training.model.context_parallel_size=2: context parallelism needs Transformer Engine attention, on GPUs only",
    ),
    (
        ["model.sequence_parallel=true", "model.tensor_model_parallel_size=2", "trainer.devices=2"],
        "training.model.sequence_parallel=True: sequence parallelism needs Transformer Engine's norms, on GPUs only",
    ),
    (
        ["model.data.data_type=energon", "model.data.path=null"],
        "training.model.data.path=None: data_type energon reads",
    ),
    (["model.caption_dropout_rate=1.0"], "training.model.caption_dropout_rate=1.0: must be in [0, 1)"),
    (["model.num_attention_heads=5"], "training.model.hidden_size=64: is not divisible by num_attention_heads (5)"),
]


@pytest.mark.parametrize("overrides, words", REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_mistakes_are_refused_in_one_line(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(
        ["stages=[training]", "training=dit/tiny", *(f"training.{o}" for o in overrides)], results=results
    )
    assert code == 2, err
    assert err.strip().count("\n") == 0 and words in err, err
    assert not list(results.rglob("*_submission.sh"))


def test_mock_dit7b_8k_needs_its_16_nodes(launch, tmp_path):
    code, out, err = launch(["stages=[training]", "training=dit/mock_dit7b_8k", "cluster_type=interactive"])
    assert code == 2 and "training nodes=16: cluster_type=interactive runs on this machine only" in err, err
