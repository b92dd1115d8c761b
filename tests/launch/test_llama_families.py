"""The Llama-architecture families (llama, mistral, qwen2, mixtral, nemotron) at launch: each shipped size holds the
reference launcher's values, the tiny configs read what llama/tiny_pile writes, and expert parallelism (EP) is a layout
dimension every check knows: a layout megatron-core would refuse is refused here, in one line, before anything is
written. (Every config also composes, validates and renders on bcm, bcp and interactive: test_config_hub.py.)"""

from types import SimpleNamespace

import pytest
import yaml

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.schemas.moe import check_expert_layout

# config: (nodes, TP, PP, VPP, CP, EP, sequence, layers, hidden, FFN, heads, query groups, global batch, micro batch),
# from the reference launcher's conf/training/<family>/<size>.yaml. mixtral_8x22b's global batch differs: the
# reference's 1 cannot split over its layout's 24 data-parallel ranks.
REFERENCE = {
    "llama/llama2_7b": (16, 1, 1, None, 1, 1, 4096, 32, 4096, 11008, 32, None, 2048, 1),
    "llama/llama2_13b": (32, 1, 4, 10, 1, 1, 4096, 40, 5120, 13824, 40, None, 2048, 1),
    "llama/llama2_70b": (128, 4, 4, 5, 1, 1, 4096, 80, 8192, 28672, 64, 8, 2048, 1),
    "llama/llama3_8b": (16, 1, 1, None, 2, 1, 8192, 32, 4096, 14336, 32, 8, 2048, 1),
    "llama/llama3_70b": (128, 4, 4, 5, 2, 1, 8192, 80, 8192, 28672, 64, 8, 2048, 1),
    "mistral/mistral_7b": (16, 8, 1, None, 1, 1, 4096, 32, 4096, 14336, 32, 8, 32, 1),
    "qwen2/qwen2_4b": (16, 2, 1, None, 1, 1, 32768, 40, 2560, 6912, 20, 20, 2048, 1),
    "qwen2/qwen2_7b": (16, 4, 1, None, 1, 1, 32768, 32, 4096, 11008, 32, 32, 2048, 1),
    "qwen2/qwen2_14b": (32, 2, 1, None, 1, 1, 32768, 40, 5120, 13696, 40, 40, 2048, 1),
    "qwen2/qwen2_72b": (128, 4, 4, 20, 1, 1, 32768, 80, 8192, 24576, 64, 64, 2048, 1),
    "mixtral/mixtral_8x3b": (2, 1, 1, None, 1, 8, 4096, 32, 2560, 8960, 32, 8, 128, 1),
    "mixtral/mixtral_8x7b": (8, 1, 4, 8, 1, 8, 4096, 32, 4096, 14336, 32, 8, 256, 1),
    "mixtral/mixtral_8x22b": (48, 8, 2, None, 1, 1, 65536, 56, 6144, 16384, 48, 8, 24, 1),
    "nemotron/nemotron_4b": (1, 2, 1, None, 1, 1, 4096, 32, 3072, 9216, 24, 8, 32, 2),
    "nemotron/nemotron_8b": (1, 2, 1, None, 1, 1, 4096, 32, 4096, 16384, 32, None, 32, 2),
    "nemotron/nemotron_15b": (1, 4, 1, None, 1, 1, 4096, 32, 6144, 24576, 48, 8, 32, 2),
    "nemotron/nemotron_22b": (1, 2, 4, 10, 1, 1, 4096, 40, 6144, 24576, 48, None, 32, 1),
    "nemotron/nemotron_340b": (768, 8, 8, 12, 1, 1, 4096, 96, 18432, 73728, 96, 8, 2304, 1),
}
# What the architecture of each family is, whatever the size: (normalization, activation, positions, bias, q/k/v
# bias, tied embeddings, experts).
ARCHITECTURE = {
    "llama": ("rmsnorm", "fast-swiglu", "rope", False, False, False, None),
    "mistral": ("rmsnorm", "fast-swiglu", "rope", False, False, False, None),
    "qwen2": ("rmsnorm", "fast-swiglu", "rope", False, True, False, None),
    "mixtral": ("rmsnorm", "fast-swiglu", "rope", False, False, False, 8),
    "nemotron": ("layernorm1p", "squared-relu", "rope", False, False, False, None),
}


def _resolved(launch, tmp_path, overrides):
    results = tmp_path / "results"
    code, out, err = launch(overrides, results=results)
    assert code == 0, err
    (config,) = results.rglob("*_hydra.yaml")
    return yaml.safe_load(config.read_text())


@pytest.mark.parametrize("choice", sorted(REFERENCE))
def test_each_size_holds_the_reference_values(choice, launch, tmp_path):
    c = _resolved(launch, tmp_path, ["stages=[training]", f"training={choice}"])
    m = c["model"]
    got = (
        c["trainer"]["num_nodes"],
        m["tensor_model_parallel_size"],
        m["pipeline_model_parallel_size"],
        m["virtual_pipeline_model_parallel_size"],
        m["context_parallel_size"],
        m["expert_model_parallel_size"],
        m["encoder_seq_length"],
        m["num_layers"],
        m["hidden_size"],
        m["ffn_hidden_size"],
        m["num_attention_heads"],
        m["num_query_groups"],
        m["global_batch_size"],
        m["micro_batch_size"],
    )
    assert got == REFERENCE[choice]
    family = choice.split("/")[0]
    assert (
        m["normalization"],
        m["activation"],
        m["position_embedding_type"],
        m["bias"],
        m["qkv_bias"],
        m["share_embeddings_and_output_weights"],
        m["num_moe_experts"],
    ) == ARCHITECTURE[family]
    assert (m["hidden_dropout"], m["attention_dropout"], c["trainer"]["precision"]) == (0.0, 0.0, "bf16")
    # Slurm ends a job at its time limit: the trainer must stop and save before it.
    assert _seconds(c["trainer"]["max_time"]) < _seconds(c["run"]["time_limit"].replace("-", ":"))


def _seconds(clock: str) -> int:
    """Seconds of a "DD:HH:MM:SS" (or "D:HH:MM:SS", "H:MM:SS") clock."""
    parts = [int(part) for part in clock.split(":")]
    days, hours, minutes, seconds = [0] * (4 - len(parts)) + parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def test_llama3_uses_its_rope_base_and_llama2_its_sentencepiece_model(launch, tmp_path):
    llama3 = _resolved(launch, tmp_path / "3", ["stages=[training]", "training=llama/llama3_8b"])["model"]
    llama2 = _resolved(launch, tmp_path / "2", ["stages=[training]", "training=llama/llama2_7b"])["model"]
    assert (llama3["rotary_base"], llama3["tokenizer"]["library"]) == (500000.0, "huggingface")
    assert llama3["tokenizer"]["model"].endswith("/llama/tokenizer.json")
    assert (llama2["rotary_base"], llama2["tokenizer"]["library"]) == (10000.0, "sentencepiece")


@pytest.mark.parametrize("family", sorted(ARCHITECTURE))
def test_the_tiny_configs_read_what_the_tiny_data_preparation_writes(family, launch, tmp_path):
    """data_preparation=llama/tiny_pile then training=<family>/tiny in one pipeline: the tokenizer and the data the
    training reads are what the preparation writes (the launcher checks the tokenizer on both sides)."""
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[data_preparation,training]",
            "data_preparation=llama/tiny_pile",
            f"training={family}/tiny",
            "check_inputs=true",
        ],
        results=results,
    )
    assert code == 0, err
    assert "a real run would refuse" not in err, err  # every input of the training is an output of the preparation
    configs = {p.parent.name: yaml.safe_load(p.read_text()) for p in results.rglob("*_hydra.yaml")}
    training = configs[f"{family}_tiny"]
    preparation = next(c for name, c in configs.items() if name != f"{family}_tiny")
    assert training["model"]["tokenizer"]["model"] == preparation["tokenizer_model"]
    assert training["run"]["preprocessed_dir"] == preparation["preprocessed_dir"]
    assert (training["trainer"]["accelerator"], training["model"]["transformer_engine"]) == ("cpu", False)


# Layouts megatron-core would refuse, and the words the one-line error holds.
EP_REFUSALS = {
    "experts do not split over EP": (
        ["training=mixtral/mixtral_8x3b", "training.model.expert_model_parallel_size=3"],
        "training.model.expert_model_parallel_size=3: must divide num_moe_experts (8)",
    ),
    "the expert grid is larger than the GPUs": (
        ["training=mixtral/mixtral_8x7b", "training.trainer.num_nodes=2"],
        "training.model.expert_model_parallel_size=8: the expert layers need TP(1) x EP(8) x PP(4) = 32 to divide "
        "nodes(2) x devices(8) = 16",
    ),
    "EP without experts": (
        ["training=llama/llama2_7b", "training.model.expert_model_parallel_size=2"],
        "training.model.expert_model_parallel_size=2: splits experts, and this model has none",
    ),
    "more experts per token than experts": (
        ["training=mixtral/tiny", "training.model.moe_router_topk=5"],
        "training.model.moe_router_topk=5: must be between 1 and num_moe_experts (4)",
    ),
    "alltoall on a CPU": (
        ["training=mixtral/tiny", "training.model.moe_token_dispatcher_type=alltoall"],
        "training.model.moe_token_dispatcher_type='alltoall': megatron-core's alltoall dispatcher needs CUDA",
    ),
    "expert biases with TP": (
        ["training=mixtral/mixtral_8x22b", "training.model.bias=true"],
        "training.model.bias=True: megatron-core's experts take bias terms only without tensor parallelism",
    ),
}


@pytest.mark.parametrize("case", sorted(EP_REFUSALS))
def test_expert_layouts_megatron_core_would_refuse_are_refused_at_launch(case, launch, tmp_path):
    overrides, words = EP_REFUSALS[case]
    results = tmp_path / "results"
    code, out, err = launch(["stages=[training]", *overrides], results=results)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), err
    assert words in lines[0], lines[0]
    assert not results.exists() or not list(results.rglob("*")), "nothing is written for a refused config"


def test_the_expert_data_parallel_size_leaves_out_cp_and_counts_ep():
    """megatron-core 0.16: attention DP = GPUs / (TP x PP x CP), expert DP = GPUs / (TP x EP x PP)."""
    model = SimpleNamespace(
        num_moe_experts=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, expert_model_parallel_size=4
    )
    assert check_expert_layout(model, nodes=4, devices=8, key="training.model") == 2  # 32 / (2 x 4 x 2)
    assert check_expert_layout(SimpleNamespace(num_moe_experts=None), 1, 8, "training.model") is None
    with pytest.raises(JobConfigError, match=r"TP\(2\) x EP\(4\) x PP\(2\) = 16 to divide nodes\(1\) x devices\(8\)"):
        check_expert_layout(model, nodes=1, devices=8, key="training.model")


# Continued pretraining starts from a checkpoint folder's weights (conversion_hf2nemo writes one beside its .nemo).
RESTORE_REFUSALS = {
    "a .nemo": (
        ["training.model.restore_from_path=/models/llama.nemo"],
        "training.model.restore_from_path='/models/llama.nemo': name a checkpoint folder, not a .nemo",
    ),
    "both starting points": (
        ["training.model.restore_from_path=/models/step-0", "training.model.resume_from_checkpoint=/runs/step-10"],
        "training.model.restore_from_path='/models/step-0': set it or resume_from_checkpoint, not both",
    ),
}


@pytest.mark.parametrize("case", sorted(RESTORE_REFUSALS))
def test_continued_pretraining_refuses_what_it_cannot_start_from(case, launch, tmp_path):
    overrides, words = RESTORE_REFUSALS[case]
    code, out, err = launch(["stages=[training]", "training=llama/tiny", *overrides], results=tmp_path / "results")
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_continued_pretraining_checks_its_checkpoint_is_there(launch, tmp_path):
    """The dry run lists the starting checkpoint among the inputs a real run would miss."""
    missing = tmp_path / "hf_llama2" / "results" / "checkpoints" / "step-0"
    code, out, err = launch(
        [
            "stages=[training]",
            "training=llama/tiny",
            f"training.model.restore_from_path={missing}",
            "check_inputs=true",
        ],
        results=tmp_path / "results",
    )
    assert code == 0, err
    assert f"a real run would refuse training.model.restore_from_path='{missing}'" in err, err
