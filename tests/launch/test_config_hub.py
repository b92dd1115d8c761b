"""Every shipped stage config composes, validates and renders on every backend (never run here)."""

import subprocess

import pytest

from nemo_launcher.launch.aliases import alias_target
from nemo_launcher.launch.families import FAMILIES
from nemo_launcher.launch.resolvers import REPO_ROOT

from .test_pipeline_as_a_whole import default_training

CONF = REPO_ROOT / "conf"
TRAINING = sorted(str(p.relative_to(CONF / "training").with_suffix("")) for p in (CONF / "training").rglob("*.yaml"))


# The sizes the seed names for each family (mT5 11b and 23b are upstream's), and the tiny one every family has.
SEED_SIZES = {
    "gpt3": {"126m", "400m_improved", "1b_improved", "5b", "7b_improved", "20b", "40b", "40b_improved", "175b", "tiny"},
    "t5": {"220m", "3b", "11b", "23b", "41b", "tiny"},
    "mt5": {"170m", "390m", "3b", "11b", "23b", "tiny"},
    "bert": {"110m", "4b", "20b", "100b", "tiny"},
}


@pytest.mark.parametrize("family", sorted(SEED_SIZES))
def test_the_seed_training_configs_are_all_there(family):
    assert SEED_SIZES[family] <= {name.split("/")[1] for name in TRAINING if name.startswith(f"{family}/")}


CLUSTER_TYPES = ("bcm", "bcp", "interactive")

# The shipped configs the launcher refuses on purpose: (training config, cluster_type) -> words the one-line
# error must hold. On interactive (one node of 8 GPUs) a model parallel group larger than 8 cannot fit.
REFUSED = {
    ("gpt3/175b", "interactive"): (
        "training.model.tensor_model_parallel_size=8",
        "TP(8) x PP(16) x CP(1) = 128",
        "does not divide nodes(1) x devices(8) = 8",
    ),
    ("gpt3/40b_improved", "interactive"): (
        "training.model.tensor_model_parallel_size=8",
        "TP(8) x PP(2) x CP(1) = 16",
        "does not divide nodes(1) x devices(8) = 8",
    ),
    **{
        (f"gpt3/{name}", "interactive"): (
            "training.model.tensor_model_parallel_size=8",
            f"= {gpus} does not divide",
            "nodes(1) x devices(8) = 8",
        )
        for name, gpus in (
            ("5b_64k", 32),
            ("40b_16k", 32),
            ("40b_32k", 64),
            ("40b_64k", 128),
            ("175b_16k", 512),
            ("175b_32k", 512),
            ("175b_fp8", 64),
        )
    },
    # The Llama-architecture sizes whose model copy is larger than one node, and Mixtral 8x7B, whose expert grid
    # TP x EP x PP = 32 is larger than one node's 8 GPUs although its attention layers fit (TP x PP = 4).
    **{
        (choice, "interactive"): ("training.model.tensor_model_parallel_size=4", f"= {gpus} does not divide")
        for choice, gpus in (("llama/llama2_70b", 16), ("llama/llama3_70b", 32), ("qwen2/qwen2_72b", 16))
    },
    ("mixtral/mixtral_8x22b", "interactive"): ("TP(8) x PP(2) x CP(1) = 16 does not divide",),
    ("nemotron/nemotron_340b", "interactive"): ("TP(8) x PP(8) x CP(1) = 64 does not divide",),
    ("mixtral/mixtral_8x7b", "interactive"): (
        "training.model.expert_model_parallel_size=8",
        "TP(1) x EP(8) x PP(4) = 32 to divide nodes(1) x devices(8) = 8",
    ),
    ("bert/20b", "interactive"): (
        "training.model.tensor_model_parallel_size=4",
        "TP(4) x PP(4) = 16",
        "does not divide nodes(1) x devices(8) = 8",
    ),
    ("bert/100b", "interactive"): (
        "training.model.tensor_model_parallel_size=4",
        "TP(4) x PP(16) = 64",
        "does not divide nodes(1) x devices(8) = 8",
    ),
    # On one node the distributed optimizer shards over 1-2 data-parallel replicas only: the performance model
    # predicts more memory per GPU than an A100 80GB has (launch/predictions.py).
    **{
        (choice, "interactive"): (
            "Error: training: predicted ",
            "GiB per GPU does not fit the 80 GiB of cluster.gpu_type=a100-80gb",
            f"distributed optimizer over DP {dp}",
            "or set memory_check=false to submit it anyway",
        )
        for choice, dp in (("gpt3/40b", 1), ("t5/23b", 2), ("mt5/23b", 2))
    },
    # CLIP has no gradient accumulation: one node's 8 GPUs cannot make the seed's global batch.
    **{
        (f"clip/{name}", "interactive"): (
            f"training.model.global_batch_size={gbs}",
            "CLIP has no gradient accumulation",
            f"micro_batch_size({mbs}) x GPUs (nodes(1) x devices(8) = 8) = {8 * mbs}",
        )
        for name, mbs, gbs in (
            ("vit_B_32", 500, 32000),
            ("vit_L_14", 112, 32256),
            ("vit_H_14", 80, 32000),
            ("vit_g_14", 88, 32384),
        )
    },
}


def _launch_training(launch, choice, cluster_type, results):
    overrides = ["stages=[training]", f"training={choice}", f"cluster_type={cluster_type}"]
    if cluster_type == "interactive":
        overrides.append("training.trainer.num_nodes=1")  # interactive runs on one machine
    return launch(overrides, results=results)


@pytest.mark.parametrize(
    "choice, cluster_type", [(c, t) for c in TRAINING for t in CLUSTER_TYPES if (c, t) not in REFUSED]
)
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


@pytest.mark.parametrize("choice", [c for c in TRAINING if not c.endswith("/tiny")])
def test_gpu_configs_ask_for_what_the_seed_says(choice, launch, tmp_path):
    import yaml

    results = tmp_path / "results"
    assert launch(["stages=[training]", f"training={choice}"], results=results)[0] == 0
    (config,) = results.rglob("*_hydra.yaml")
    resolved = yaml.safe_load(config.read_text())
    (script,) = results.rglob("*_submission.sh")
    text = script.read_text()
    assert f"#SBATCH --nodes={resolved['trainer']['num_nodes']}\n" in text
    assert (
        f"#SBATCH --ntasks-per-node={SEED_DEVICES.get(choice, 8)}\n" in text and "#SBATCH --gpus-per-node=8\n" in text
    )
    assert resolved["trainer"]["precision"] == SEED_PRECISION.get(choice.split("/")[0], "bf16")


# Processes (GPUs) per node where the seed uses fewer than a node's 8: DreamBooth fine-tunes on one GPU.
SEED_DEVICES = {"dreambooth/860m": 1}

# The seed's Stable Diffusion trains in FP16 (its feature matrix: no BF16 for SD); every other family in bf16.
SEED_PRECISION = {"stable_diffusion": 16}

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
    got = (
        m["num_layers"],
        m["hidden_size"],
        m["num_attention_heads"],
        m["tensor_model_parallel_size"],
        m["pipeline_model_parallel_size"],
        c["trainer"]["num_nodes"],
        m["global_batch_size"],
        m["micro_batch_size"],
    )
    assert got == SEED_GPT[size]
    assert m["encoder_seq_length"] == 2048
    if size.endswith("_improved"):
        assert (
            m["activation"],
            m["position_embedding_type"],
            m["hidden_dropout"],
            m["bias"],
            m["share_embeddings_and_output_weights"],
        ) == ("fast-swiglu", "rope", 0.0, False, False)


# The reference launcher's further GPT configs (notes/reference-gpt3-keys.md): (nodes, max_steps, time_limit, seq,
# TP, PP, CP, VPP, MBS, GBS, fp8, SP, layers, hidden).
REFERENCE_GPT = {
    "5b_16k": (2, 100, "04:00:00", 16384, 4, 1, 1, None, 1, 32, False, False, 24, 4096),
    "5b_32k": (2, 100, "04:00:00", 32768, 8, 1, 1, None, 1, 32, False, False, 24, 4096),
    "5b_64k": (4, 100, "04:00:00", 65536, 8, 1, 4, None, 1, 32, False, False, 24, 4096),
    "40b_16k": (16, 100, "04:00:00", 16384, 8, 4, 1, 12, 1, 32, False, True, 48, 8192),
    "40b_32k": (16, 100, "04:00:00", 32768, 8, 4, 2, 12, 1, 32, False, True, 48, 8192),
    "40b_64k": (16, 100, "04:00:00", 65536, 8, 4, 4, 12, 1, 32, False, True, 48, 8192),
    "175b_16k": (64, 100, "04:00:00", 16384, 8, 8, 8, 12, 1, 32, False, True, 96, 12288),
    "175b_32k": (64, 100, "04:00:00", 32768, 8, 4, 16, 24, 1, 32, False, True, 96, 12288),
    "175b_fp8": (128, 75000, "26-00:00:00", 2048, 8, 8, 1, 12, 2, 2048, True, True, 96, 12288),
    "mlperf": (1, 100, "00:30:00", 2048, 2, 4, 1, 3, 1, 8, True, True, 12, 12288),
}


@pytest.mark.parametrize("size", sorted(REFERENCE_GPT))
def test_reference_gpt_configs_hold_the_notes_values(size, launch, tmp_path):
    c = _training_config(launch, f"gpt3/{size}", tmp_path)
    m, t = c["model"], c["trainer"]
    got = (
        t["num_nodes"],
        t["max_steps"],
        c["run"]["time_limit"],
        m["encoder_seq_length"],
        m["tensor_model_parallel_size"],
        m["pipeline_model_parallel_size"],
        m["context_parallel_size"],
        m["virtual_pipeline_model_parallel_size"],
        m["micro_batch_size"],
        m["global_batch_size"],
        m["fp8"],
        m["sequence_parallel"],
        m["num_layers"],
        m["hidden_size"],
    )
    assert got == REFERENCE_GPT[size]
    assert m["max_position_embeddings"] == m["encoder_seq_length"] == m["data"]["seq_length"]
    gpus = t["num_nodes"] * t["devices"]
    model_copy = m["tensor_model_parallel_size"] * m["pipeline_model_parallel_size"] * m["context_parallel_size"]
    assert m["global_batch_size"] % (m["micro_batch_size"] * gpus // model_copy) == 0


def test_context_parallelism_enters_the_data_parallel_size(launch, tmp_path):
    """gpt3/5b_64k: 32 GPUs / (TP 8 x CP 4) = DP 1; doubling CP leaves no whole data-parallel rank."""
    code, out, err = launch(
        ["stages=[training]", "training=gpt3/5b_64k", "training.model.context_parallel_size=8"],
        results=tmp_path / "results",
    )
    assert code == 2 and "TP(8) x PP(1) x CP(8) = 64 does not divide nodes(4) x devices(8) = 32" in err, err
    code, out, err = launch(
        [
            "stages=[training]",
            "training=gpt3/5b_64k",
            "training.model.context_parallel_size=2",
            "training.model.global_batch_size=3",
        ],
        results=tmp_path / "again",
    )
    assert code == 2 and "data-parallel size = nodes(4) x devices(8) / (TP(8) x PP(1) x CP(2))" in err, err


def _training_config(launch, choice, tmp_path):
    import yaml

    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", f"training={choice}"], results=results)
    assert code == 0, err
    (config,) = results.rglob("*_hydra.yaml")
    return yaml.safe_load(config.read_text())


def _tokens(config) -> float:
    return config["trainer"]["max_steps"] * config["model"]["global_batch_size"] * config["model"]["encoder_seq_length"]


# config: (layers of the encoder and of the decoder, hidden, FFN, heads, GPUs per model copy (TP x PP), nodes,
# global batch), from the seed's T5 and mT5 tables (global batches from its convergence runs; where it gives none,
# t5/11b, 23b, 41b and mt5/11b, 23b, upstream 23.07's). megatron-core 0.16 cannot split a T5 over pipeline stages,
# so every size runs with PP 1: t5/23b and t5/41b, TP 4 x PP 2 in the seed, run as TP 4 (upstream's layout) and
# TP 8 (the seed's 8 GPUs per model copy).
SEED_T5 = {
    "t5/220m": (12, 768, 2048, 12, 1, 4, 2048),
    "t5/3b": (24, 2048, 5120, 32, 2, 20, 2160),
    "t5/11b": (24, 4096, 10240, 64, 4, 20, 1920),
    "t5/23b": (36, 5120, 10880, 64, 4, 40, 1920),
    "t5/41b": (36, 6144, 10880, 96, 8, 40, 1920),
    "mt5/170m": (8, 512, 1024, 6, 1, 4, 2048),
    "mt5/390m": (8, 512, 2048, 12, 1, 8, 2048),
    "mt5/3b": (24, 2048, 5120, 32, 2, 20, 1920),
    "mt5/11b": (24, 4096, 10240, 64, 4, 20, 1920),
    "mt5/23b": (36, 5120, 10880, 80, 4, 40, 1920),
}


@pytest.mark.parametrize("choice", sorted(SEED_T5))
def test_t5_sizes_match_the_seed(choice, launch, tmp_path):
    c = _training_config(launch, choice, tmp_path)
    m = c["model"]
    got = (
        m["encoder_num_layers"],
        m["hidden_size"],
        m["ffn_hidden_size"],
        m["num_attention_heads"],
        m["tensor_model_parallel_size"] * m["pipeline_model_parallel_size"],
        c["trainer"]["num_nodes"],
        m["global_batch_size"],
    )
    assert got == SEED_T5[choice]
    assert m["decoder_num_layers"] == m["encoder_num_layers"] and m["pipeline_model_parallel_size"] == 1
    assert (m["encoder_seq_length"], m["activation"], c["trainer"]["precision"]) == (512, "geglu", "bf16")
    assert m["optim"]["name"] == "distributed_fused_adam"
    assert 0.95e12 < _tokens(c) < 1.25e12, "the seed trains T5 and mT5 on 1T tokens"
    tokenizer = m["tokenizer"]
    if choice.startswith("mt5/"):  # the mT5 SentencePiece model: 250k pieces + 100 sentinels
        assert (tokenizer["library"], tokenizer["num_sentinel_tokens"]) == ("sentencepiece", 100)
        assert tokenizer["model"].endswith("/mc4/bpe/mt5_tokenizer.model")
    else:
        assert (tokenizer["library"], tokenizer["type"]) == ("megatron", "BertWordPieceCase")


# size: (layers, hidden, FFN, heads, TP, PP, nodes, global batch), from the seed's BERT tables (the LDDL table's
# nodes, TP, PP and global batch).
SEED_BERT = {
    "110m": (12, 768, 3072, 12, 1, 1, 8, 256),
    "4b": (48, 2560, 10240, 40, 1, 1, 16, 2048),
    "20b": (48, 6144, 24576, 96, 4, 4, 32, 4096),
    "100b": (96, 9216, 36864, 96, 4, 16, 128, 4096),
}


@pytest.mark.parametrize("size", sorted(SEED_BERT))
def test_bert_sizes_match_the_seed(size, launch, tmp_path):
    c = _training_config(launch, f"bert/{size}", tmp_path)
    m = c["model"]
    got = (
        m["num_layers"],
        m["hidden_size"],
        m["ffn_hidden_size"],
        m["num_attention_heads"],
        m["tensor_model_parallel_size"],
        m["pipeline_model_parallel_size"],
        c["trainer"]["num_nodes"],
        m["global_batch_size"],
    )
    assert got == SEED_BERT[size]
    assert (m["encoder_seq_length"], m["activation"], c["trainer"]["precision"]) == (512, "geglu", "bf16")
    assert (m["tokenizer"]["type"], m["bert_binary_head"]) == ("BertWordPieceLowerCase", True)


@pytest.mark.parametrize("choice", ["t5/tiny", "mt5/tiny", "bert/tiny"])
def test_tiny_configs_train_on_this_cpu_from_what_the_tiny_data_preparation_writes(choice, launch, tmp_path):
    c = _training_config(launch, choice, tmp_path)
    m, data_dir = c["model"], str(REPO_ROOT / "data")
    assert (c["trainer"]["accelerator"], c["trainer"]["precision"], c["trainer"]["devices"]) == ("cpu", 32, 1)
    assert (
        m["hidden_size"],
        m["num_attention_heads"],
        m["encoder_seq_length"],
        m["use_cpu_initialization"],
        m["transformer_engine"],
    ) == (64, 4, 128, True, False)
    folder = {"t5": "tiny_pile_t5", "mt5": "tiny_mc4", "bert": "tiny_pile_bert"}[choice.split("/")[0]]
    assert c["run"]["preprocessed_dir"] == f"{data_dir}/{folder}/preprocessed"
    tokenizer_file = m["tokenizer"]["model"] if choice == "mt5/tiny" else m["tokenizer"]["vocab_file"]
    assert tokenizer_file == f"{data_dir}/{folder}/bpe/" + (
        "mt5_tokenizer.model" if choice == "mt5/tiny" else "vocab.txt"
    )
    if choice != "bert/tiny":
        assert (m["encoder_num_layers"], m["decoder_num_layers"], m["data"]["seq_length_dec"]) == (2, 2, 64)


STAGE_GROUPS = (
    "data_preparation",
    "training",
    "conversion",
    "conversion_nemo2hf",
    "fine_tuning",
    "peft",
    "prompt_learning",
    "adapter_learning",
    "ia3_learning",
    "evaluation",
    "fw_inference",
    "export",
)
EVERY_CONFIG = sorted(
    (group, str(path.relative_to(CONF / group).with_suffix("")))
    for group in STAGE_GROUPS
    for path in (CONF / group).rglob("*.yaml")
)
# Shipped configs that ask the user for a value (`???` or an empty list) and say which: config -> key in the error.
ASKS_FOR = {
    ("fine_tuning", "gpt3/custom_task"): "fine_tuning.model.data.train_ds.file_names",
    ("fine_tuning", "t5/custom_task"): "fine_tuning.model.data.train_ds.src_file_name",
    ("fine_tuning", "mt5/custom_task"): "fine_tuning.model.data.train_ds.src_file_name",
    ("data_preparation", "generic/custom_dataset"): "data_preparation.raw_dataset_files",
    ("data_preparation", "multimodal/download_multimodal"): "data_preparation.dataset_repo_id",
    ("fw_inference", "vit/imagenet1k"): "fw_inference.data_path",
    ("fw_inference", "clip/clip_similarity"): "fw_inference.image_path",
    ("fw_inference", "instruct_pix2pix/edit_cli"): "fw_inference.edit.input",
    ("export", "instruct_pix2pix/export_instruct_pix2pix"): "export.edit.input",
}


@pytest.mark.parametrize("group, choice", EVERY_CONFIG, ids=[f"{g}={c}" for g, c in EVERY_CONFIG])
def test_every_shipped_config_of_every_stage_binds(group, choice, launch, tmp_path):
    """Each config binds to its job program's schema as shipped (a dry run binds every selected stage)."""
    results = tmp_path / "results"
    target = alias_target(group, choice) or choice  # a seed's spelling (conversion=convert_t5) stands for its target
    family = target.rpartition("/")[0]
    family = FAMILIES[family].tunes or family if family in FAMILIES else family  # prompt_t5 evaluates t5's models
    # Downstream stages follow a training run of their own family: the one each config follows by default, which is
    # the model it is checked against (test_pipeline_as_a_whole.py). GPT's configs without a default of their own
    # follow the root config's training (gpt3/5b).
    default = default_training(CONF / group / f"{choice}.yaml")
    default = default or (None if family == "gpt3" else f"{family}/tiny")
    follows = [f"training={default}"] if group not in ("training", "data_preparation") and default else []
    code, out, err = launch([f"stages=[{group}]", f"{group}={choice}", *follows], results=results)
    if (group, target) in ASKS_FOR:
        assert code == 2 and ASKS_FOR[group, target] in err, err
    else:
        assert code == 0, err
        assert list(results.rglob("*_hydra.yaml")), "the resolved config was written"
