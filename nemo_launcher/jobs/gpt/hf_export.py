"""A Hugging Face checkpoint (config.json + model.safetensors + tokenizer files) from a GPT state dict.

    architecture = hf_architecture(model_config)        # "GPT2LMHeadModel", "LlamaForCausalLM", or HFExportError
    export_hf(model_config, state_dict, out_dir, vocab_size=50257, eod=50256)

Written without `transformers` (only safetensors): the files are what `from_pretrained` reads.

| our model (`model:` keys)                                         | Hugging Face class |
|-------------------------------------------------------------------|--------------------|
| learned_absolute positions, gelu, layernorm or layernorm1p,       | GPT2LMHeadModel    |
| one key/value head per query head                                 |                    |
| rope (rotary_percentage 1), fast-swiglu, rmsnorm                  | LlamaForCausalLM   |
| the same with qkv_bias and no other bias                          | Qwen2ForCausalLM   |
| the same with num_moe_experts (no biases)                         | MixtralForCausalLM |

Only exact mappings are made; anything else is refused with the reason. Biases: GPT-2 always has
them (a model without gets zeros, which is exact); Llama has `attention_bias`/`mlp_bias` switches.
layernorm1p stores gamma - 1, so GPT-2 gets gamma = stored + 1. Llama has RMSNorm only, so the
`_improved` configs' layernorm1p has no Llama form: train with `normalization: rmsnorm` to export.
The vocabulary is cut back to model.vocab_size where the model has one (an imported model keeps its own rows),
else to the tokenizer's size (megatron pads it for TP alignment): the padding rows are never a target, and a
generator must not sample them. rotary_base and Llama 3.1's rope scaling (rope_scaling) are written as
transformers 4 and 5 read them. A Mistral model imported here comes back as LlamaForCausalLM: without a sliding
window the two classes compute the same function.
"""

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..core.conversion import HFExportError, save_hf_checkpoint

GPT2 = "GPT2LMHeadModel"
LLAMA = "LlamaForCausalLM"
QWEN2 = "Qwen2ForCausalLM"
MIXTRAL = "MixtralForCausalLM"
ROPE_BASE = 10000.0  # model.rotary_base's default, megatron-core GPTModel's own
# megatron-core's Llama 3.1 scaling constants (contract/hf_architectures.py checks an import against them).
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def hf_architecture(model: Mapping[str, Any]) -> str:
    """The Hugging Face class that computes exactly what `model` computes, or HFExportError with the reasons."""
    get = lambda key, default=None: model.get(key, default)  # noqa: E731
    heads = int(get("num_attention_heads"))
    groups = get("num_query_groups") or heads
    head_dim = get("kv_channels") or int(get("hidden_size")) // heads
    position, activation, norm = (
        get("position_embedding_type", "learned_absolute"),
        get("activation", "gelu"),
        get("normalization", "layernorm"),
    )
    gpt2_blockers = _blockers(
        [
            (
                position != "learned_absolute",
                f"position_embedding_type is {position} (GPT-2 learns absolute positions)",
            ),
            (activation != "gelu", f"activation is {activation} (GPT-2 uses gelu)"),
            (norm not in ("layernorm", "layernorm1p"), f"normalization is {norm} (GPT-2 uses LayerNorm)"),
            (groups != heads, f"num_query_groups is {groups} (GPT-2 has one key/value head per query head)"),
            (
                head_dim * heads != int(get("hidden_size")),
                f"kv_channels({head_dim}) x heads({heads}) != hidden_size (GPT-2 ties them)",
            ),
        ]
    )
    if not gpt2_blockers:
        return GPT2
    llama_blockers = _blockers(
        [
            (position != "rope", f"position_embedding_type is {position} (Llama uses rope)"),
            (
                position == "rope" and float(get("rotary_percentage", 1.0)) != 1.0,
                f"rotary_percentage is {get('rotary_percentage')} (Llama rotates every channel)",
            ),
            (activation != "fast-swiglu", f"activation is {activation} (Llama uses SwiGLU: fast-swiglu)"),
            (
                norm != "rmsnorm",
                f"normalization is {norm} (Llama has RMSNorm only; layernorm1p is a LayerNorm with "
                "mean subtraction and bias, which RMSNorm cannot express; train with normalization: rmsnorm)",
            ),
        ]
    )
    if not llama_blockers:
        return _llama_class(model)
    raise HFExportError(
        f"no Hugging Face architecture computes this model exactly. GPT-2: {gpt2_blockers}. Llama: {llama_blockers}"
    )


def _llama_class(model: Mapping[str, Any]) -> str:
    """Which class of the Llama layout: experts make a Mixtral, a q/k/v-only bias a Qwen2, anything else a Llama."""
    bias, qkv_bias = bool(model.get("bias", True)), bool(model.get("qkv_bias", False))
    if model.get("num_moe_experts"):
        if bias or qkv_bias:
            raise HFExportError("a mixture of experts with biases has no Hugging Face class (Mixtral has none)")
        return MIXTRAL
    if qkv_bias and not bias:
        return QWEN2
    return LLAMA


def _blockers(checks) -> str:
    return "; ".join(reason for failed, reason in checks if failed)


def export_hf(
    model: Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    out_dir,
    vocab_size: int,
    eod: int | None,
    dtype: torch.dtype | None = None,
) -> str:
    """Writes the checkpoint into out_dir (created; existing files of the same names replaced). Returns the class name.

    vocab_size: the tokenizer's vocabulary (rows kept of the padded tables); eod: its end-of-document id,
    used as BOS and EOS as for GPT-2. dtype: of the written tensors, default that of the state dict.
    """
    architecture = hf_architecture(model)
    vocab_size = int(model.get("vocab_size") or vocab_size)
    mapper = _gpt2 if architecture == GPT2 else _llama
    tensors, config = mapper(model, state_dict, vocab_size)
    dtype = dtype or state_dict["embedding.word_embeddings.weight"].dtype
    config.update(
        architectures=[architecture],
        bos_token_id=eod,
        eos_token_id=eod,
        vocab_size=vocab_size,
        torch_dtype=str(dtype).replace("torch.", ""),
        initializer_range=float(model.get("init_method_std", 0.02)),
        use_cache=True,
    )
    save_hf_checkpoint(out_dir, tensors, config, dtype)
    return architecture


def write_hf_tokenizer(tokenizer: Mapping[str, Any], out_dir, eod_token: str | None, max_length: int) -> list[str]:
    """Copies the tokenizer files next to the weights in the names `AutoTokenizer` looks for; returns them."""
    out = Path(out_dir)
    library = tokenizer.get("library")
    written = []
    if library == "megatron":
        shutil.copyfile(tokenizer["vocab_file"], out / "vocab.json")
        shutil.copyfile(tokenizer["merge_file"], out / "merges.txt")
        written += ["vocab.json", "merges.txt"]
        settings = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False}
    elif library == "huggingface":
        shutil.copyfile(tokenizer["model"], out / "tokenizer.json")
        written.append("tokenizer.json")
        settings = {"tokenizer_class": "PreTrainedTokenizerFast"}
    else:  # sentencepiece: the file is copied; which HF class matches its normalisation is the user's call
        shutil.copyfile(tokenizer["model"], out / "tokenizer.model")
        return ["tokenizer.model"]
    if eod_token is not None:
        settings.update(bos_token=eod_token, eos_token=eod_token, unk_token=eod_token)
    settings["model_max_length"] = max_length
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return written + ["tokenizer_config.json"]


# ---- weight mappings ---------------------------------------------------------------------------------


def _split_qkv(weight: torch.Tensor, heads: int, groups: int, head_dim: int):
    """megatron's linear_qkv rows are group-major: per query group, its query heads, then one key, one value."""
    per_group = heads // groups
    grouped = weight.reshape(groups, per_group + 2, head_dim, *weight.shape[1:])
    q = grouped[:, :per_group].reshape(heads * head_dim, *weight.shape[1:])
    k = grouped[:, per_group].reshape(groups * head_dim, *weight.shape[1:])
    v = grouped[:, per_group + 1].reshape(groups * head_dim, *weight.shape[1:])
    return q, k, v


def _norm(state_dict, key: str, zero_centred: bool) -> torch.Tensor:
    weight = state_dict[key]
    return weight + 1 if zero_centred else weight


def _bias(state_dict, key: str, size: int, like: torch.Tensor) -> torch.Tensor:
    return state_dict[key] if key in state_dict else torch.zeros(size, dtype=like.dtype)


def _gpt2(model, sd, vocab: int):
    hidden, layers = int(model["hidden_size"]), int(model["num_layers"])
    heads, ffn = int(model["num_attention_heads"]), int(model["ffn_hidden_size"])
    one_p = model.get("normalization", "layernorm") == "layernorm1p"
    tied = bool(model.get("share_embeddings_and_output_weights", True))
    wte = sd["embedding.word_embeddings.weight"]
    out = {"transformer.wte.weight": wte[:vocab], "transformer.wpe.weight": sd["embedding.position_embeddings.weight"]}
    for i in range(layers):
        src, dst = f"decoder.layers.{i}.", f"transformer.h.{i}."
        q, k, v = _split_qkv(sd[src + "self_attention.linear_qkv.weight"], heads, heads, hidden // heads)
        qkv_bias = _bias(sd, src + "self_attention.linear_qkv.bias", 3 * hidden, wte)
        bq, bk, bv = _split_qkv(qkv_bias, heads, heads, hidden // heads)
        out.update(
            {
                # GPT-2's Conv1D stores weights as [in, out]: the transpose of torch.nn.Linear's.
                dst + "ln_1.weight": _norm(sd, src + "input_layernorm.weight", one_p),
                dst + "ln_1.bias": sd[src + "input_layernorm.bias"],
                dst + "attn.c_attn.weight": torch.cat([q, k, v], 0).t(),
                dst + "attn.c_attn.bias": torch.cat([bq, bk, bv], 0),
                dst + "attn.c_proj.weight": sd[src + "self_attention.linear_proj.weight"].t(),
                dst + "attn.c_proj.bias": _bias(sd, src + "self_attention.linear_proj.bias", hidden, wte),
                dst + "ln_2.weight": _norm(sd, src + "pre_mlp_layernorm.weight", one_p),
                dst + "ln_2.bias": sd[src + "pre_mlp_layernorm.bias"],
                dst + "mlp.c_fc.weight": sd[src + "mlp.linear_fc1.weight"].t(),
                dst + "mlp.c_fc.bias": _bias(sd, src + "mlp.linear_fc1.bias", ffn, wte),
                dst + "mlp.c_proj.weight": sd[src + "mlp.linear_fc2.weight"].t(),
                dst + "mlp.c_proj.bias": _bias(sd, src + "mlp.linear_fc2.bias", hidden, wte),
            }
        )
    out["transformer.ln_f.weight"] = _norm(sd, "decoder.final_layernorm.weight", one_p)
    out["transformer.ln_f.bias"] = sd["decoder.final_layernorm.bias"]
    if not tied:
        out["lm_head.weight"] = sd["output_layer.weight"][:vocab]
    config = {
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": ffn,
        "n_positions": int(model["max_position_embeddings"]),
        "n_ctx": int(model["max_position_embeddings"]),
        "activation_function": "gelu",  # exact erf GELU, as megatron's F.gelu (GPT-2's own is gelu_new, tanh)
        "layer_norm_epsilon": float(model.get("layernorm_epsilon", 1e-5)),
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "tie_word_embeddings": tied,
    }
    return out, config


def _llama(model, sd, vocab: int):
    hidden, layers = int(model["hidden_size"]), int(model["num_layers"])
    heads = int(model["num_attention_heads"])
    groups = int(model.get("num_query_groups") or heads)
    head_dim = int(model.get("kv_channels") or hidden // heads)
    ffn = int(model["ffn_hidden_size"])
    bias = bool(model.get("bias", True))
    qkv_bias = bias or bool(model.get("qkv_bias", False))
    experts = int(model.get("num_moe_experts") or 0)
    tied = bool(model.get("share_embeddings_and_output_weights", True))
    out = {"model.embed_tokens.weight": sd["embedding.word_embeddings.weight"][:vocab]}
    for i in range(layers):
        src, dst = f"decoder.layers.{i}.", f"model.layers.{i}."
        q, k, v = _split_qkv(sd[src + "self_attention.linear_qkv.weight"], heads, groups, head_dim)
        out.update(
            {
                dst + "input_layernorm.weight": sd[src + "input_layernorm.weight"],
                dst + "self_attn.q_proj.weight": q,
                dst + "self_attn.k_proj.weight": k,
                dst + "self_attn.v_proj.weight": v,
                dst + "self_attn.o_proj.weight": sd[src + "self_attention.linear_proj.weight"],
                dst + "post_attention_layernorm.weight": sd[src + "pre_mlp_layernorm.weight"],
            }
        )
        if qkv_bias:
            bq, bk, bv = _split_qkv(sd[src + "self_attention.linear_qkv.bias"], heads, groups, head_dim)
            out.update({dst + "self_attn.q_proj.bias": bq, dst + "self_attn.k_proj.bias": bk})
            out[dst + "self_attn.v_proj.bias"] = bv
        if experts:
            out.update(_mixtral_experts(sd, src + "mlp.", dst + "block_sparse_moe.", experts))
            continue
        gate, up = sd[src + "mlp.linear_fc1.weight"].chunk(2, dim=0)  # megatron's SwiGLU: silu(first) * second
        out.update({dst + "mlp.gate_proj.weight": gate, dst + "mlp.up_proj.weight": up})
        out[dst + "mlp.down_proj.weight"] = sd[src + "mlp.linear_fc2.weight"]
        if bias:
            bgate, bup = sd[src + "mlp.linear_fc1.bias"].chunk(2, dim=0)
            out.update(
                {
                    dst + "self_attn.o_proj.bias": sd[src + "self_attention.linear_proj.bias"],
                    dst + "mlp.gate_proj.bias": bgate,
                    dst + "mlp.up_proj.bias": bup,
                    dst + "mlp.down_proj.bias": sd[src + "mlp.linear_fc2.bias"],
                }
            )
    out["model.norm.weight"] = sd["decoder.final_layernorm.weight"]
    if not tied:
        out["lm_head.weight"] = sd["output_layer.weight"][:vocab]
    config: dict[str, Any] = {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": groups,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": int(model["max_position_embeddings"]),
        "rms_norm_eps": float(model.get("layernorm_epsilon", 1e-5)),
        **_rope(model),
        "attention_dropout": 0.0,
        "tie_word_embeddings": tied,
        **_class_keys(model, bias, experts),
    }
    return out, config


def _rope(model: Mapping[str, Any]) -> dict[str, Any]:
    """transformers >= 5 reads rope_parameters, 4.x reads rope_theta and rope_scaling; both say the same."""
    base = float(model.get("rotary_base", ROPE_BASE))
    scaling = {"rope_type": "default"}
    if model.get("rope_scaling"):
        scaling = {"rope_type": "llama3", "factor": float(model.get("rope_scaling_factor", 8.0)), **LLAMA3_ROPE}
    keys: dict[str, Any] = {"rope_theta": base, "rope_parameters": {**scaling, "rope_theta": base}}
    if model.get("rope_scaling"):
        keys["rope_scaling"] = scaling
    return keys


def _class_keys(model: Mapping[str, Any], bias: bool, experts: int) -> dict[str, Any]:
    """config.json keys of the class hf_architecture chose."""
    if experts:
        return {
            "model_type": "mixtral",
            "num_local_experts": experts,
            "num_experts_per_tok": int(model.get("moe_router_topk", 2)),
            "router_aux_loss_coef": float(model.get("moe_aux_loss_coeff", 0.0)),
            "router_jitter_noise": 0.0,
            "sliding_window": None,
            "output_router_logits": False,
        }
    if _llama_class(model) == QWEN2:
        return {"model_type": "qwen2", "use_sliding_window": False, "sliding_window": None}
    return {"model_type": "llama", "attention_bias": bias, "mlp_bias": bias, "pretraining_tp": 1}


def _mixtral_experts(sd, src: str, dst: str, experts: int) -> dict[str, torch.Tensor]:
    """Our router and local experts -> Mixtral's gate and w1 (gate), w3 (up), w2 (down)."""
    out = {dst + "gate.weight": sd[src + "router.weight"]}
    for expert in range(experts):
        ours, theirs = f"{src}experts.local_experts.{expert}.", f"{dst}experts.{expert}."
        w1, w3 = sd[ours + "linear_fc1.weight"].chunk(2, dim=0)
        out.update(
            {theirs + "w1.weight": w1, theirs + "w3.weight": w3, theirs + "w2.weight": sd[ours + "linear_fc2.weight"]}
        )
    return out
