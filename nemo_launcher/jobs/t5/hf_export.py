"""A Hugging Face checkpoint (config.json + model.safetensors + tokenizer files) from a T5 or mT5 state dict, where
T5ForConditionalGeneration (MT5ForConditionalGeneration for a SentencePiece vocabulary) computes megatron-core's
T5Model exactly.

    architecture = hf_architecture(model_config)       # "T5ForConditionalGeneration", or HFExportError with the reasons
    export_hf(model_config, state_dict, out_dir, tokenizer)
    write_hf_tokenizer(model_config["tokenizer"], tokenizer, out_dir, max_length=512)

Written without `transformers` (only safetensors): the files are what `from_pretrained` reads.

What the two compute, part by part (megatron-core 0.16's T5Model with the local spec, transformers' T5):
- positions: Hugging Face's T5 has no position table; it adds a bias per head from bucketed relative distances,
  bidirectional in the encoder and causal in the decoder, computed once per stack and shared by its layers, and
  none in cross-attention. megatron-core's `relative` positions are that, bucket for bucket (its bucketing is a
  copy of transformers'). `learned_absolute` (the family default) has no counterpart.
- norms: T5LayerNorm is an RMSNorm with a weight and no bias; `rmsnorm` matches, `layernorm` (the family default)
  subtracts the mean and adds a bias, which T5 cannot.
- biases: T5's linear layers have none; `bias: true` (the family default) trains them.
- output layer: megatron-core's tied T5 output layer (`share_embeddings_and_output_weights: true`, the family
  default) adds a trained bias per vocabulary entry, which T5's lm_head has no room for. An untied one is a plain
  matrix: T5 v1.1's separate lm_head (`tie_word_embeddings: false`, which also turns off the d_model^-0.5 scaling of
  the decoder output that a tied T5 applies).
- attention: megatron scales q.k by 1/sqrt(kv_channels); T5 does not scale, so the query weights are divided by
  sqrt(kv_channels) on the way (exact up to rounding, and exact when kv_channels is a power of four). Any
  kv_channels works (T5's d_kv).
- MLP: gelu (exact erf), relu, and the gated geglu (tanh GELU: T5's `gated-gelu` is gelu_new), swiglu
  (`gated-silu`) and reglu (`gated-relu`): each has a `feed_forward_proj`. megatron's linear_fc1 rows are
  [gate; up], T5's wi_0 (through the activation) and wi_1.
- padding: both hide padded encoder keys only, in the encoder and in cross-attention.
The vocabulary is cut back to the tokenizer's size (megatron pads it for TP alignment); the decoder starts from
the tokenizer's bos, as the trainer's decoder inputs do.
"""

import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..core.conversion import HFExportError, save_hf_checkpoint

T5 = "T5ForConditionalGeneration"
MT5 = "MT5ForConditionalGeneration"
# model.activation -> T5Config.feed_forward_proj
FEED_FORWARD = {"gelu": "gelu", "relu": "relu", "geglu": "gated-gelu", "swiglu": "gated-silu", "reglu": "gated-relu"}


def hf_architecture(model: Mapping[str, Any]) -> str:
    """The Hugging Face class that computes exactly what `model` computes, or HFExportError with the reasons."""
    get = lambda key, default=None: model.get(key, default)  # noqa: E731
    position, norm = get("position_embedding_type", "learned_absolute"), get("normalization", "layernorm")
    activation = get("activation", "geglu")
    blockers = [
        reason
        for failed, reason in [
            (
                position != "relative",
                f"position_embedding_type is {position} (T5 has no position table; it adds a "
                "bucketed relative-position bias: train with position_embedding_type: relative)",
            ),
            (
                norm != "rmsnorm",
                f"normalization is {norm} (T5LayerNorm is an RMSNorm without mean or bias: train with "
                "normalization: rmsnorm)",
            ),
            (bool(get("bias", True)), "bias is true (T5's linear layers have no biases: train with bias: false)"),
            (
                bool(get("share_embeddings_and_output_weights", True)),
                "share_embeddings_and_output_weights is true (megatron-core's tied output layer adds a trained bias "
                "per vocabulary entry, which T5's lm_head lacks: train with "
                "share_embeddings_and_output_weights: false)",
            ),
            (
                activation not in FEED_FORWARD,
                f"activation is {activation} (T5's feed_forward_proj has {', '.join(FEED_FORWARD)})",
            ),
        ]
        if failed
    ]
    if blockers:
        raise HFExportError("no Hugging Face class computes this T5 exactly: " + "; ".join(blockers))
    return MT5 if (get("tokenizer") or {}).get("library") == "sentencepiece" else T5


def export_hf(
    model: Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    out_dir,
    tokenizer,
    dtype: torch.dtype | None = None,
) -> str:
    """Writes config.json and model.safetensors into out_dir. Returns the class name.

    tokenizer: the model's (load_tokenizer with its sentinels): its vocabulary size is the number of rows kept,
    its pad, eos and bos ids go into the config. dtype: of the written tensors, default that of the state dict."""
    architecture = hf_architecture(model)
    vocab = tokenizer.vocab_size
    tensors = _t5_tensors(model, state_dict, vocab)
    dtype = dtype or state_dict["embedding.word_embeddings.weight"].dtype
    heads = int(model["num_attention_heads"])
    config = {
        "architectures": [architecture],
        "model_type": "mt5" if architecture == MT5 else "t5",
        "vocab_size": vocab,
        "d_model": int(model["hidden_size"]),
        "d_ff": int(model["ffn_hidden_size"]),
        "d_kv": _head_size(model),
        "num_heads": heads,
        "num_layers": int(model["encoder_num_layers"]),
        "num_decoder_layers": int(model["decoder_num_layers"]),
        "relative_attention_num_buckets": int(model.get("relative_attention_num_buckets", 32)),
        "relative_attention_max_distance": int(model.get("relative_attention_max_distance", 128)),
        "layer_norm_epsilon": float(model.get("layernorm_epsilon", 1e-5)),
        "feed_forward_proj": FEED_FORWARD[model.get("activation", "geglu")],
        "dropout_rate": float(model.get("hidden_dropout", 0.1)),
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "use_cache": True,
        "tie_word_embeddings": False,  # a separate lm_head, and no d_model^-0.5 scaling of the decoder output
        "pad_token_id": tokenizer.pad,
        "eos_token_id": tokenizer.eos,
        "decoder_start_token_id": tokenizer.bos,
        "torch_dtype": str(dtype).replace("torch.", ""),
    }
    save_hf_checkpoint(out_dir, tensors, config, dtype)
    return architecture


def write_hf_tokenizer(spec: Mapping[str, Any], tokenizer, out_dir, max_length: int) -> list[str]:
    """The tokenizer files `AutoTokenizer` reads, encoding text to the ids the model was trained on; returns them.

    T5 (WordPiece vocab.txt): a tokenizer.json of the same pipeline (jobs/common/tokenizer.py) with the pieces the
    trainer appended ([BOS], [EOS], the sentinels) as special tokens at their ids. mT5 (SentencePiece): the model
    as spiece.model for T5Tokenizer, which appends the sentinels after the pieces as the trainer does."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sentinels = [tokenizer.inv_vocab[i] for i in tokenizer.additional_special_tokens_ids]
    settings: dict[str, Any] = {
        "model_max_length": max_length,
        "eos_token": tokenizer.inv_vocab[tokenizer.eos],
        "pad_token": tokenizer.inv_vocab[tokenizer.pad],
    }
    if spec["library"] == "megatron":
        from ..common.tokenizer import WORDPIECE_TYPES, wordpiece_pipeline

        pipeline = wordpiece_pipeline(spec["vocab_file"], WORDPIECE_TYPES[spec["type"]])
        from tokenizers import AddedToken

        appended = range(pipeline.get_vocab_size(), tokenizer.vocab_size)
        pipeline.add_special_tokens([AddedToken(tokenizer.inv_vocab[i], special=True) for i in appended])
        pipeline.save(str(out / "tokenizer.json"))
        settings.update(
            tokenizer_class="PreTrainedTokenizerFast",
            unk_token="[UNK]",
            bos_token=tokenizer.inv_vocab[tokenizer.bos],
            additional_special_tokens=sentinels,
        )
        written = ["tokenizer.json"]
    else:
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(spec["model"]))
        shutil.copyfile(spec["model"], out / "spiece.model")
        # Sentinels the model lacks were appended after its pieces, <extra_id_0> highest: T5Tokenizer's extra_ids.
        in_model = all(i < sp.get_piece_size() for i in tokenizer.additional_special_tokens_ids)
        settings.update(
            tokenizer_class="T5Tokenizer",
            unk_token=sp.id_to_piece(sp.unk_id()),
            extra_ids=0 if in_model else len(sentinels),
            additional_special_tokens=sentinels,
        )
        written = ["spiece.model"]
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return written + ["tokenizer_config.json"]


# ---- weight mapping ----------------------------------------------------------------------------------------


def _head_size(model: Mapping[str, Any]) -> int:
    return int(model.get("kv_channels") or int(model["hidden_size"]) // int(model["num_attention_heads"]))


def _per_head(fused: torch.Tensor, heads: int, parts: int, head_size: int) -> list[torch.Tensor]:
    """megatron's fused projections are head-major: per head, its `parts` blocks (q, k, v or k, v) of head_size rows."""
    grouped = fused.reshape(heads, parts, head_size, *fused.shape[1:])
    return [grouped[:, i].reshape(heads * head_size, *fused.shape[1:]) for i in range(parts)]


def _t5_tensors(model: Mapping[str, Any], sd: Mapping[str, torch.Tensor], vocab: int) -> dict[str, torch.Tensor]:
    heads, head_size = int(model["num_attention_heads"]), _head_size(model)
    query_scale = 1.0 / math.sqrt(head_size)  # megatron's softmax scale, folded into the queries
    gated = FEED_FORWARD[model.get("activation", "geglu")].startswith("gated-")
    out = {
        "shared.weight": sd["embedding.word_embeddings.weight"][:vocab],
        "lm_head.weight": sd["output_layer.weight"][:vocab],
    }
    for stack, count in (("encoder", int(model["encoder_num_layers"])), ("decoder", int(model["decoder_num_layers"]))):
        out[f"{stack}.final_layer_norm.weight"] = sd[f"{stack}.final_layernorm.weight"]
        out[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = sd[
            f"{stack}_relative_pos_emb.relative_attention_bias.weight"
        ]
        for i in range(count):
            mine, theirs = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
            q, k, v = _per_head(sd[mine + "self_attention.linear_qkv.weight"], heads, 3, head_size)
            out.update(
                {
                    theirs + "0.layer_norm.weight": sd[mine + "input_layernorm.weight"],
                    theirs + "0.SelfAttention.q.weight": q * query_scale,
                    theirs + "0.SelfAttention.k.weight": k,
                    theirs + "0.SelfAttention.v.weight": v,
                    theirs + "0.SelfAttention.o.weight": sd[mine + "self_attention.linear_proj.weight"],
                }
            )
            mlp = theirs + ("1" if stack == "encoder" else "2")
            if stack == "decoder":
                k, v = _per_head(sd[mine + "cross_attention.linear_kv.weight"], heads, 2, head_size)
                out.update(
                    {
                        theirs + "1.layer_norm.weight": sd[mine + "pre_cross_attn_layernorm.weight"],
                        theirs + "1.EncDecAttention.q.weight": sd[mine + "cross_attention.linear_q.weight"]
                        * query_scale,
                        theirs + "1.EncDecAttention.k.weight": k,
                        theirs + "1.EncDecAttention.v.weight": v,
                        theirs + "1.EncDecAttention.o.weight": sd[mine + "cross_attention.linear_proj.weight"],
                    }
                )
            out[mlp + ".layer_norm.weight"] = sd[mine + "pre_mlp_layernorm.weight"]
            fc1 = sd[mine + "mlp.linear_fc1.weight"]
            if gated:
                gate, up = fc1.chunk(2, dim=0)
                out[mlp + ".DenseReluDense.wi_0.weight"], out[mlp + ".DenseReluDense.wi_1.weight"] = gate, up
            else:
                out[mlp + ".DenseReluDense.wi.weight"] = fc1
            out[mlp + ".DenseReluDense.wo.weight"] = sd[mine + "mlp.linear_fc2.weight"]
    return out
