"""Hugging Face causal-LM folders our GPT computes exactly, read without torch: config.json, the safetensors headers
and the tokenizer files, turned into the `model:` section a GPT `.nemo` stores, or refused with the reason.

    folder = HFFolder.read("/data/hf/llama", key="conversion_hf2nemo.run.huggingface_ckpt_path")
    folder.model_section()          # GPT `model:` keys (rope, SwiGLU, RMSNorm, GQA, biases, experts)
    folder.tensors                  # {name: shape} of every stored tensor, from the headers only

The launcher reads the folder when it exists at launch; the import job reads it again when it starts (the same
code), so a setting the converter cannot represent is refused before the queue wait, in one line naming the
folder and the config.json key. Rules:

| config.json                              | becomes                             | refused when                       |
|------------------------------------------|-------------------------------------|------------------------------------|
| architectures                            | (the tensors expected)              | not one of ARCHITECTURES           |
| hidden_act                               | activation: fast-swiglu             | not silu                           |
| rope_theta, rope_parameters.rope_theta   | rotary_base                         |                                    |
| rope_scaling, rope_parameters (llama3)   | rope_scaling, rope_scaling_factor   | another type; llama3 constants     |
|                                          |                                     | other than megatron-core's         |
| sliding_window (Qwen2: if switched on)   |                                     | below max_position_embeddings      |
| tie_word_embeddings                      | share_embeddings_and_output_weights | lm_head.weight says otherwise      |
| attention_bias, mlp_bias (Llama)         | bias                                | one without the other              |
| (Qwen2)                                  | qkv_bias: true, bias: false         |                                    |
| num_local_experts, num_experts_per_tok   | num_moe_experts, moe_router_topk    | router_jitter_noise above 0        |
| (every tensor in the safetensors files)  |                                     | a name or shape the layout lacks   |

Only safetensors are read: a pickled pytorch_model.bin runs code when it is loaded.
"""

import dataclasses
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .binding import JobConfigError, config_fault
from .model_facts import ModelFacts, facts_of_model

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
HF_TOKENIZER = "tokenizer.json"
SENTENCEPIECE_TOKENIZER = "tokenizer.model"
# megatron-core's Llama 3.1 rope scaling fixes these three (RotaryEmbedding._apply_scaling); only the factor varies.
MEGATRON_LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# Buffers some older checkpoints store that transformers recomputes: never weights.
_RECOMPUTED = (".rotary_emb.inv_freq",)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a Hugging Face class adds to the common Llama layout."""

    qkv_bias_only: bool = False  # Qwen2: q/k/v projections carry biases, nothing else does
    experts: bool = False  # Mixtral: a routed mixture of SwiGLU experts in place of the MLP
    llama_bias_switches: bool = False  # Llama: attention_bias and mlp_bias
    sliding_window_switch: str | None = None  # Qwen2: the window counts only when this key is true


ARCHITECTURES = {
    "LlamaForCausalLM": Architecture(llama_bias_switches=True),
    "MistralForCausalLM": Architecture(),
    "Qwen2ForCausalLM": Architecture(qkv_bias_only=True, sliding_window_switch="use_sliding_window"),
    "MixtralForCausalLM": Architecture(experts=True),
}


@dataclasses.dataclass(frozen=True)
class HFFolder:
    path: Path
    key: str  # the config key that named the folder, for messages
    config: dict[str, Any]  # config.json
    tensors: dict[str, tuple[int, ...]]  # every stored tensor's shape, from the safetensors headers

    @classmethod
    def read(cls, path, key: str) -> "HFFolder":
        folder = Path(path)
        config_file = folder / CONFIG_FILE
        try:
            config = json.loads(config_file.read_text())
        except FileNotFoundError:
            raise config_fault(key, str(path), f"no {CONFIG_FILE} in it; name a Hugging Face model folder") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise config_fault(key, str(path), f"{config_file} cannot be read as JSON ({error})") from None
        if not isinstance(config, dict):
            raise config_fault(key, str(path), f"{config_file} holds no JSON object")
        return cls(folder, key, config, safetensors_shapes(folder, key))

    def refuse(self, reason: str) -> JobConfigError:
        return config_fault(self.key, str(self.path), reason)

    @property
    def architecture_name(self) -> str:
        names = self.config.get("architectures") or []
        if len(names) != 1 or names[0] not in ARCHITECTURES:
            raise self.refuse(
                f"config.json's architectures is {names}; the converter represents exactly one of "
                f"{', '.join(ARCHITECTURES)}"
            )
        return names[0]

    def tokenizer(self) -> dict[str, Any]:
        """Our `model.tokenizer` section: tokenizer.json through `tokenizers` when shipped, else SentencePiece."""
        if (self.path / HF_TOKENIZER).is_file():
            return {"library": "huggingface", "type": None, "model": str(self.path / HF_TOKENIZER)}
        if (self.path / SENTENCEPIECE_TOKENIZER).is_file():
            return {"library": "sentencepiece", "type": None, "model": str(self.path / SENTENCEPIECE_TOKENIZER)}
        raise self.refuse(f"holds neither {HF_TOKENIZER} nor {SENTENCEPIECE_TOKENIZER}; copy the model's tokenizer in")

    def model_section(self) -> dict[str, Any]:
        """The GPT `model:` keys that compute this model exactly (the rest of a training section is added by
        imported_model_config); every rule of the table above is checked here."""
        name = self.architecture_name
        arch = ARCHITECTURES[name]
        get = self.config.get
        if get("hidden_act", "silu") != "silu":
            raise self.refuse(f"config.json's hidden_act is {get('hidden_act')!r}; SwiGLU here gates with silu")
        heads, hidden = self._size("num_attention_heads"), self._size("hidden_size")
        max_positions = self._size("max_position_embeddings")
        self._check_window(arch, max_positions)
        section: dict[str, Any] = {
            "num_layers": self._size("num_hidden_layers"),
            "hidden_size": hidden,
            "ffn_hidden_size": self._size("intermediate_size"),
            "num_attention_heads": heads,
            "num_query_groups": int(get("num_key_value_heads") or heads),
            "kv_channels": int(get("head_dim") or hidden // heads),
            "encoder_seq_length": max_positions,
            "max_position_embeddings": max_positions,
            "vocab_size": self._size("vocab_size"),
            "layernorm_epsilon": float(get("rms_norm_eps", 1e-6)),
            "init_method_std": float(get("initializer_range", 0.02)),
            "hidden_dropout": 0.0,
            "attention_dropout": float(get("attention_dropout", 0.0)),
            "normalization": "rmsnorm",
            "activation": "fast-swiglu",
            "position_embedding_type": "rope",
            "rotary_percentage": 1.0,
            **self._rope(),
            **self._biases(arch),
            "share_embeddings_and_output_weights": self._tied(),
            **self._experts(arch),
        }
        self._check_tensors(name, section)
        return section

    def dtype(self) -> str:
        """Our precision name of the stored weights (config.json's dtype, or torch_dtype before transformers 5)."""
        stored = self.config.get("dtype") or self.config.get("torch_dtype") or "float32"
        names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
        if stored not in names:
            raise self.refuse(f"config.json's dtype is {stored!r}; the weights must be one of {', '.join(names)}")
        return names[stored]

    # ---- the rules -----------------------------------------------------------------------------------

    def _size(self, name: str) -> int:
        """A size config.json must give, as a positive integer."""
        value = self.config.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.refuse(f"config.json's {name} is {value!r}; a model of this layout needs a positive integer")
        return value

    def _rope(self) -> dict[str, Any]:
        """rotary_base and Llama 3.1's scaling from either spelling: transformers 5's rope_parameters, or 4.x's
        rope_theta with rope_scaling."""
        get = self.config.get
        parameters = dict(get("rope_parameters") or {})
        scaling = dict(get("rope_scaling") or parameters)
        base = parameters.get("rope_theta", get("rope_theta", 10000.0))
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if get("partial_rotary_factor", 1.0) != 1.0:
            raise self.refuse("config.json's partial_rotary_factor is not 1; this Llama layout rotates every channel")
        if kind == "default":
            return {"rotary_base": float(base), "rope_scaling": False}
        if kind != "llama3":
            raise self.refuse(
                f"config.json's rope type is {kind!r}; megatron-core's rotary embedding computes the default rope "
                "and Llama 3.1's scaling (llama3) only"
            )
        differ = {
            name: scaling.get(name)
            for name, value in MEGATRON_LLAMA3_ROPE.items()
            if float(scaling.get(name, -1)) != float(value)
        }
        if differ:
            raise self.refuse(
                f"config.json's llama3 rope scaling has {differ}; megatron-core fixes "
                f"{MEGATRON_LLAMA3_ROPE} and varies only the factor"
            )
        return {"rotary_base": float(base), "rope_scaling": True, "rope_scaling_factor": float(scaling["factor"])}

    def _check_window(self, arch: Architecture, max_positions: int) -> None:
        window = self.config.get("sliding_window")
        if arch.sliding_window_switch and not self.config.get(arch.sliding_window_switch, False):
            return
        if window is not None and int(window) < max_positions:
            raise self.refuse(
                f"config.json's sliding_window is {window}, below max_position_embeddings ({max_positions}); "
                "megatron-core's local attention attends to the whole context, so logits would differ beyond "
                f"{window} tokens"
            )

    def _biases(self, arch: Architecture) -> dict[str, bool]:
        if arch.qkv_bias_only:
            return {"bias": False, "qkv_bias": True}
        if not arch.llama_bias_switches:
            return {"bias": False, "qkv_bias": False}
        attention, mlp = bool(self.config.get("attention_bias", False)), bool(self.config.get("mlp_bias", False))
        if attention != mlp:
            raise self.refuse(
                f"config.json's attention_bias is {attention} and mlp_bias {mlp}; megatron-core's add_bias_linear "
                "gives every linear layer a bias or none"
            )
        return {"bias": attention, "qkv_bias": False}

    def _tied(self) -> bool:
        tied = bool(self.config.get("tie_word_embeddings", False))
        if tied and "lm_head.weight" in self.tensors:
            raise self.refuse(
                "config.json's tie_word_embeddings is true but the weights hold their own lm_head.weight; "
                "transformers would ignore it, so it is unclear which head is meant"
            )
        if not tied and "lm_head.weight" not in self.tensors:
            raise self.refuse(
                "config.json's tie_word_embeddings is false but the weights hold no lm_head.weight; "
                "transformers would start that head from random values"
            )
        return tied

    def _experts(self, arch: Architecture) -> dict[str, Any]:
        if not arch.experts:
            return {}
        jitter = float(self.config.get("router_jitter_noise", 0.0))
        if jitter:
            raise self.refuse(f"config.json's router_jitter_noise is {jitter}; megatron-core's router has no noise")
        return {
            "num_moe_experts": int(self.config["num_local_experts"]),
            "moe_router_topk": int(self.config["num_experts_per_tok"]),
            "moe_aux_loss_coeff": float(self.config.get("router_aux_loss_coef", 0.0)),
        }

    def _check_tensors(self, name: str, section: Mapping[str, Any]) -> None:
        """The stored tensors are exactly those the architecture has, in its shapes: nothing is left behind."""
        expected = expected_tensors(name, section)
        stored = {key: shape for key, shape in self.tensors.items() if not key.endswith(_RECOMPUTED)}
        missing = sorted(set(expected) - set(stored))
        extra = sorted(set(stored) - set(expected))
        if missing or extra:
            raise self.refuse(
                f"the weights do not match config.json: missing {missing[:4] or 'none'}, unknown "
                f"{extra[:4] or 'none'} ({len(missing)} and {len(extra)} in all)"
            )
        wrong = [
            f"{key} {list(stored[key])} (expected {list(shape)})"
            for key, shape in expected.items()
            if stored[key] != shape
        ]
        if wrong:
            raise self.refuse(f"tensor shapes differ from config.json: {'; '.join(wrong[:3])}")


def expected_tensors(architecture: str, section: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor name and shape a Hugging Face checkpoint of this architecture and `model:` section holds."""
    hidden, ffn, vocab = section["hidden_size"], section["ffn_hidden_size"], section["vocab_size"]
    head_dim, heads, groups = section["kv_channels"], section["num_attention_heads"], section["num_query_groups"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not section["share_embeddings_and_output_weights"]:
        shapes["lm_head.weight"] = (vocab, hidden)
    attention = {"q_proj": heads * head_dim, "k_proj": groups * head_dim, "v_proj": groups * head_dim}
    for layer in range(section["num_layers"]):
        prefix = f"model.layers.{layer}."
        shapes[prefix + "input_layernorm.weight"] = (hidden,)
        shapes[prefix + "post_attention_layernorm.weight"] = (hidden,)
        for projection, rows in attention.items():
            shapes[f"{prefix}self_attn.{projection}.weight"] = (rows, hidden)
            if section["bias"] or section["qkv_bias"]:
                shapes[f"{prefix}self_attn.{projection}.bias"] = (rows,)
        shapes[prefix + "self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        if section.get("num_moe_experts"):
            experts = section["num_moe_experts"]
            shapes[prefix + "block_sparse_moe.gate.weight"] = (experts, hidden)
            for expert in range(experts):
                name = f"{prefix}block_sparse_moe.experts.{expert}."
                shapes.update({name + "w1.weight": (ffn, hidden), name + "w3.weight": (ffn, hidden)})
                shapes[name + "w2.weight"] = (hidden, ffn)
            continue
        shapes.update(
            {
                prefix + "mlp.gate_proj.weight": (ffn, hidden),
                prefix + "mlp.up_proj.weight": (ffn, hidden),
                prefix + "mlp.down_proj.weight": (hidden, ffn),
            }
        )
        if section["bias"]:
            shapes[prefix + "self_attn.o_proj.bias"] = (hidden,)
            shapes.update({prefix + f"mlp.{p}.bias": (ffn,) for p in ("gate_proj", "up_proj")})
            shapes[prefix + "mlp.down_proj.bias"] = (hidden,)
    return shapes


def safetensors_files(folder: Path, key: str) -> list[Path]:
    """The weight files: model.safetensors, or the shards model.safetensors.index.json lists."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise config_fault(key, str(folder), f"{index} has no readable weight_map ({error})") from None
        return [folder / name for name in sorted(set(weight_map.values()))]
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    shipped = "pytorch_model.bin (pickled: it runs code when loaded)" if (folder / "pytorch_model.bin").exists() else ""
    raise config_fault(
        key,
        str(folder),
        f"no {SINGLE_FILE} or {INDEX_FILE} in it{'; it has ' + shipped if shipped else ''}; "
        "save the model with safe_serialization (transformers' default)",
    )


def safetensors_shapes(folder: Path, key: str) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of every weight file, from its JSON header (8-byte little-endian length, then JSON)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in safetensors_files(folder, key):
        try:
            with open(path, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length))
        except (OSError, struct.error, ValueError) as error:
            raise config_fault(key, str(folder), f"{path.name} is not a readable safetensors file ({error})") from None
        shapes.update({name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"})
    return shapes


def imported_model_config(folder: HFFolder, tensor_parallel: int, pipeline_parallel: int) -> dict[str, Any]:
    """The `model:` section a GPT `.nemo` of this folder stores: the architecture's keys, its tokenizer, the layout
    written, and the training keys a GPT section needs (one sample per step over the full context: fine-tuning and
    training configs set their own)."""
    section = folder.model_section()
    return {
        **section,
        "micro_batch_size": 1,
        "global_batch_size": 1,
        "tensor_model_parallel_size": tensor_parallel,
        "pipeline_model_parallel_size": pipeline_parallel,
        "tokenizer": folder.tokenizer(),
        "optim": {"name": "fused_adam", "lr": 1.0e-4, "sched": {"name": "CosineAnnealing"}},
        "data": {"seq_length": section["encoder_seq_length"]},
    }


def facts_of_hf_folder(path, key: str) -> ModelFacts:
    """The facts of the model a Hugging Face folder holds, as the .nemo its import writes will state them, for the
    stages of a pipeline that load that .nemo (launch/model_sources.py)."""
    folder = HFFolder.read(path, key)
    return facts_of_model(imported_model_config(folder, 1, 1), f"the Hugging Face model in {folder.path}")
