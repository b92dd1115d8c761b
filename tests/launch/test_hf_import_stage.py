"""The conversion_hf2nemo stage at launch, torch-free: every shipped config renders on every backend, and a Hugging
Face folder whose config.json asks for what the converter cannot represent exactly is refused in one line (exit 2)
before anything is written.

The folders are written here without torch or transformers: config.json, a tokenizer.json, and a model.safetensors
whose header names the tensors (8-byte length, JSON, then zero bytes), which is all the launch-time reader opens.
"""

import json
import math
import struct
import subprocess

import pytest
import yaml

from .test_golden import FIXED

CONFIGS = {
    "hf_llama2/convert_llama2_nemo": "hf_llama2",
    "hf_mistral_7b/convert_mixtral_7b_nemo": "hf_mistral_7b",
    "hf_mixtral/convert_mixtral_nemo": "hf_mixtral",
    "hf_qwen2/convert_qwen2_nemo": "hf_qwen2",
}
HIDDEN, FFN, VOCAB, HEAD = 8, 16, 16, 4  # 2 query heads of 4 channels, 1 key/value head


def _llama_config(**changes) -> dict:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 32,
        "vocab_size": VOCAB,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "tie_word_embeddings": False,
        "dtype": "float32",
    }
    config.update(changes)
    return config


def _llama_tensors(biases: str = "none") -> dict[str, tuple[int, ...]]:
    """A one-layer Llama's tensors, written out by hand (not by the code under test). biases: none, qkv (Qwen2's
    q/k/v biases) or all (every linear layer's)."""
    layer = "model.layers.0."
    tensors = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        "lm_head.weight": (VOCAB, HIDDEN),
        "model.norm.weight": (HIDDEN,),
        layer + "input_layernorm.weight": (HIDDEN,),
        layer + "post_attention_layernorm.weight": (HIDDEN,),
        layer + "self_attn.q_proj.weight": (2 * HEAD, HIDDEN),
        layer + "self_attn.k_proj.weight": (HEAD, HIDDEN),
        layer + "self_attn.v_proj.weight": (HEAD, HIDDEN),
        layer + "self_attn.o_proj.weight": (HIDDEN, 2 * HEAD),
        layer + "mlp.gate_proj.weight": (FFN, HIDDEN),
        layer + "mlp.up_proj.weight": (FFN, HIDDEN),
        layer + "mlp.down_proj.weight": (HIDDEN, FFN),
    }
    if biases in ("qkv", "all"):
        tensors.update({f"{layer}self_attn.{p}_proj.bias": (2 * HEAD if p == "q" else HEAD,) for p in "qkv"})
    if biases == "all":
        tensors.update({f"{layer}self_attn.o_proj.bias": (HIDDEN,), f"{layer}mlp.down_proj.bias": (HIDDEN,)})
        tensors.update({f"{layer}mlp.gate_proj.bias": (FFN,), f"{layer}mlp.up_proj.bias": (FFN,)})
    return tensors


def write_folder(path, config: dict, tensors: dict, tokenizer: bool = True, weights: str = "model.safetensors"):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    (path / weights).write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def _without(tensors: dict, name: str) -> dict:
    return {key: shape for key, shape in tensors.items() if key != name}


LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0}
LLAMA3.update(high_freq_factor=4.0, original_max_position_embeddings=8192)
MIXTRAL = dict(architectures=["MixtralForCausalLM"], num_local_experts=2, num_experts_per_tok=1)
# case -> (config.json, tensors, options for write_folder, extra overrides, what the one line must say)
REFUSALS = {
    "unknown architecture": (
        _llama_config(architectures=["GPTNeoXForCausalLM"]),
        _llama_tensors(),
        {},
        [],
        "config.json's architectures is ['GPTNeoXForCausalLM']; the converter represents exactly one of "
        "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM",
    ),
    "activation": (_llama_config(hidden_act="gelu"), _llama_tensors(), {}, [], "hidden_act is 'gelu'"),
    "unknown rope type": (
        _llama_config(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}),
        _llama_tensors(),
        {},
        [],
        "rope type is 'yarn'; megatron-core's rotary embedding computes the default rope and Llama 3.1's scaling",
    ),
    "llama3 constants megatron-core fixes otherwise": (
        _llama_config(rope_parameters={**LLAMA3, "high_freq_factor": 2.0}),
        _llama_tensors(),
        {},
        [],
        "llama3 rope scaling has {'high_freq_factor': 2.0}",
    ),
    "llama3 scaling in transformers 4's spelling": (
        _llama_config(rope_theta=500000.0, rope_scaling={**LLAMA3, "original_max_position_embeddings": 4096}),
        _llama_tensors(),
        {},
        [],
        "{'original_max_position_embeddings': 4096}",
    ),
    "sliding window": (
        _llama_config(architectures=["MistralForCausalLM"], sliding_window=16),
        _llama_tensors(),
        {},
        [],
        "sliding_window is 16, below max_position_embeddings (32)",
    ),
    "tied, but the files hold a head": (
        _llama_config(tie_word_embeddings=True),
        _llama_tensors(),
        {},
        [],
        "tie_word_embeddings is true but the weights hold their own lm_head.weight",
    ),
    "untied, but the files hold no head": (
        _llama_config(),
        _without(_llama_tensors(), "lm_head.weight"),
        {},
        [],
        "tie_word_embeddings is false but the weights hold no lm_head.weight",
    ),
    "attention bias without an MLP bias": (
        _llama_config(attention_bias=True, mlp_bias=False),
        _llama_tensors("all"),
        {},
        [],
        "attention_bias is True and mlp_bias False",
    ),
    "router noise": (
        _llama_config(**MIXTRAL, router_jitter_noise=0.1),
        _llama_tensors(),
        {},
        [],
        "router_jitter_noise is 0.1",
    ),
    "a tensor the layout lacks": (
        _llama_config(),
        {**_llama_tensors(), "model.layers.0.self_attn.rotary_gate.weight": (HIDDEN,)},
        {},
        [],
        "unknown ['model.layers.0.self_attn.rotary_gate.weight']",
    ),
    "a shape config.json does not give": (
        _llama_config(),
        {**_llama_tensors(), "model.embed_tokens.weight": (VOCAB + 1, HIDDEN)},
        {},
        [],
        "model.embed_tokens.weight [17, 8] (expected [16, 8])",
    ),
    "pickled weights only": (
        _llama_config(),
        _llama_tensors(),
        {"weights": "pytorch_model.bin"},
        [],
        "it has pytorch_model.bin (pickled: it runs code when loaded)",
    ),
    "weights of a dtype we do not train in": (
        _llama_config(dtype="float8_e4m3fn"),
        _llama_tensors(),
        {},
        [],
        "config.json's dtype is 'float8_e4m3fn'; the weights must be one of float32, bfloat16, float16",
    ),
    "a size config.json leaves out": (
        {key: value for key, value in _llama_config().items() if key != "num_hidden_layers"},
        _llama_tensors(),
        {},
        [],
        "config.json's num_hidden_layers is None; a model of this layout needs a positive integer",
    ),
    "no tokenizer": (_llama_config(), _llama_tensors(), {"tokenizer": False}, [], "holds neither tokenizer.json"),
}


@pytest.mark.parametrize("cluster_type", ["bcm", "bcp", "interactive"])
@pytest.mark.parametrize("choice", sorted(CONFIGS))
def test_every_config_renders_on_every_backend(choice, cluster_type, launch, tmp_path):
    results = tmp_path / "results"
    overrides = [f"cluster_type={cluster_type}", "conversion_hf2nemo.model.tensor_model_parallel_size=2"]
    code, _, err = launch(
        FIXED + ["stages=[conversion_hf2nemo]", f"conversion_hf2nemo={choice}", *overrides], results=results
    )
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "-m nemo_launcher.jobs.gpt.hf_import --config" in text
    if cluster_type == "bcm":
        assert "#SBATCH --nodes=1\n" in text and "#SBATCH --ntasks-per-node=2\n" in text
    (config_file,) = script.parent.glob("*_hydra.yaml")
    config = yaml.safe_load(config_file.read_text())
    assert config["run"]["huggingface_ckpt_path"] == "/data/hf_ckpt"
    assert config["run"]["results_dir"] == str(script.parent)
    assert script.parent.parent == results / CONFIGS[choice]


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_the_converter_cannot_represent_is_refused_at_launch(case, launch, tmp_path):
    config, tensors, options, overrides, reason = REFUSALS[case]
    folder = write_folder(tmp_path / "hf model", config, tensors, **options)
    results = tmp_path / "results"
    code, out, err = launch(
        [
            "stages=[conversion_hf2nemo]",
            "conversion_hf2nemo=hf_llama2/convert_llama2_nemo",
            f"conversion_hf2nemo.run.huggingface_ckpt_path={folder}",
            *overrides,
        ],
        results=results,
    )
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith(f"Error: conversion_hf2nemo.run.huggingface_ckpt_path='{folder}': "), line
    assert reason in line, line
    assert not results.exists()  # nothing written, nothing submitted


@pytest.mark.parametrize(
    "config, tensors",
    [
        (_llama_config(rope_parameters=LLAMA3), _llama_tensors()),  # Llama 3.1's scaling as megatron-core has it
        (_llama_config(rope_theta=500000.0, rope_scaling=LLAMA3), _llama_tensors()),  # transformers 4's spelling
        (_llama_config(attention_bias=True, mlp_bias=True), _llama_tensors("all")),
        (_llama_config(architectures=["MistralForCausalLM"], sliding_window=None), _llama_tensors()),
        # Qwen2 counts its window only when use_sliding_window is on.
        (
            _llama_config(architectures=["Qwen2ForCausalLM"], use_sliding_window=False, sliding_window=16),
            _llama_tensors("qkv"),
        ),
    ],
    ids=["llama3.1", "llama3.1-transformers4", "llama-biases", "mistral", "qwen2-window-off"],
)
def test_what_it_represents_exactly_is_planned(config, tensors, launch, tmp_path):
    folder = write_folder(tmp_path / "hf", config, tensors)
    code, _, err = launch(
        [
            "stages=[conversion_hf2nemo]",
            "conversion_hf2nemo=hf_llama2/convert_llama2_nemo",
            f"conversion_hf2nemo.run.huggingface_ckpt_path={folder}",
        ]
    )
    assert code == 0, err


@pytest.mark.parametrize(
    "key, reason",
    [
        (
            "tensor_model_parallel_size",
            "TP(2) must divide num_attention_heads(2), num_query_groups(1), ffn_hidden_size",
        ),
        ("pipeline_model_parallel_size", "PP(2) must divide num_hidden_layers(1)"),
    ],
)
def test_a_layout_the_model_cannot_take_is_refused_at_launch(key, reason, launch, tmp_path):
    folder = write_folder(tmp_path / "hf", _llama_config(), _llama_tensors())
    code, _, err = launch(
        [
            "stages=[conversion_hf2nemo]",
            "conversion_hf2nemo=hf_llama2/convert_llama2_nemo",
            f"conversion_hf2nemo.run.huggingface_ckpt_path={folder}",
            f"conversion_hf2nemo.model.{key}=2",
        ],
        results=tmp_path / "results",
    )
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"Error: conversion_hf2nemo.model.{key}=2: {reason}"), line
    assert not (tmp_path / "results").exists()


def test_the_imported_model_section_is_what_config_json_says(tmp_path):
    """The keys the .nemo will hold, read torch-free: a Qwen2 with tied embeddings, rope_theta 1e6 and only a
    SentencePiece tokenizer; a Mixtral's experts; Llama 3.1's scaling factor."""
    from nemo_launcher.contract.hf_architectures import HFFolder

    qwen2 = _llama_config(architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True, dtype="bfloat16")
    qwen2["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    folder = write_folder(tmp_path / "qwen2", qwen2, _without(_llama_tensors("qkv"), "lm_head.weight"), tokenizer=False)
    (folder / "tokenizer.model").write_bytes(b"\0")
    read = HFFolder.read(folder, "key")
    section = read.model_section()
    expected = {"bias": False, "qkv_bias": True, "share_embeddings_and_output_weights": True, "rotary_base": 1e6}
    assert {key: section[key] for key in expected} == expected
    assert (section["num_query_groups"], section["kv_channels"], section["vocab_size"]) == (1, HEAD, VOCAB)
    assert read.tokenizer() == {"library": "sentencepiece", "type": None, "model": str(folder / "tokenizer.model")}
    assert read.dtype() == "bf16"
    (folder / "tokenizer.json").write_text("{}")  # tokenizer.json wins where both are shipped
    assert read.tokenizer()["library"] == "huggingface"

    layer = "model.layers.0."
    experts = {f"{layer}block_sparse_moe.gate.weight": (2, HIDDEN)}
    for n in range(2):
        prefix = f"{layer}block_sparse_moe.experts.{n}."
        experts.update({prefix + "w1.weight": (FFN, HIDDEN), prefix + "w3.weight": (FFN, HIDDEN)})
        experts[prefix + "w2.weight"] = (HIDDEN, FFN)
    dense = {k: v for k, v in _llama_tensors().items() if ".mlp." not in k}
    mixtral = write_folder(tmp_path / "mixtral", _llama_config(**MIXTRAL, router_aux_loss_coef=0.02), dense | experts)
    section = HFFolder.read(mixtral, "key").model_section()
    assert (section["num_moe_experts"], section["moe_router_topk"], section["moe_aux_loss_coeff"]) == (2, 1, 0.02)

    llama = write_folder(
        tmp_path / "llama", _llama_config(rope_parameters={**LLAMA3, "factor": 32.0}), _llama_tensors()
    )
    section = HFFolder.read(llama, "key").model_section()
    assert (section["rope_scaling"], section["rope_scaling_factor"], section["rotary_base"]) == (True, 32.0, 500000.0)


def test_a_stage_after_the_import_is_checked_against_the_imported_model(launch, tmp_path):
    """The pipeline is validated as a whole: a LoRA run on the .nemo this import writes meets the model config.json
    describes (2 heads), so a TP of 4 is refused at launch, naming where the facts come from."""
    folder = write_folder(tmp_path / "hf", _llama_config(), _llama_tensors())
    results = tmp_path / "results"
    nemo = results / "hf_llama2" / "convert_hf_llama2_to_nemo" / "results" / "llama2_7b.nemo"
    common = [
        "stages=[conversion_hf2nemo,peft]",
        "conversion_hf2nemo=hf_llama2/convert_llama2_nemo",
        f"conversion_hf2nemo.run.huggingface_ckpt_path={folder}",
        "peft=llama/squad",
        f"peft.model.restore_from_path={nemo}",
    ]
    code, _, err = launch([*common, "peft.model.tensor_model_parallel_size=2"], results=results)
    assert code == 0, err
    code, _, err = launch([*common, "peft.model.tensor_model_parallel_size=4"], results=results)
    assert code == 2
    assert err.strip() == (
        f"Error: peft.model.tensor_model_parallel_size=4: the model (the Hugging Face model in {folder}) has 2 "
        "attention heads, which TP must divide: choose one of 1, 2"
    )
