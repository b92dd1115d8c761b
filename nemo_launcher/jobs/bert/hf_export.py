"""A Hugging Face checkpoint (config.json + model.safetensors + vocab.txt) from a BERT state dict, where one
computes megatron-core's BERT exactly.

    architecture = hf_architecture(model_config)     # "MegatronBertForPreTraining", or HFExportError with the reasons
    export_hf(model_config, state_dict, out_dir, vocab_size=3997, pad_id=0)
    write_hf_tokenizer(tokenizer, out_dir, lower_case=True, max_length=512)

Written without `transformers` (only safetensors): the files are what `from_pretrained` reads.

Which Hugging Face class computes megatron-core's BertModel, checked layer by layer:
- `BertForPreTraining` does not. It is post-LayerNorm (a norm after each residual sum, one on the embeddings, none
  after the last layer); megatron-core's BERT is pre-LayerNorm (a norm before attention and before the MLP, inside
  the residual branch) with a final norm and no embedding norm. No choice of weights turns one into the other.
- `MegatronBertForPreTraining` (`MegatronBertForMaskedLM` without the binary head) does: no embedding norm,
  `attention.ln` and `ln` before attention and MLP, `encoder.ln` after the last layer, learned positions plus token
  types, an LM head of dense + gelu + LayerNorm and a decoder tied to the word embeddings with its own bias (an
  untied output layer goes to `decoder.weight` with tie_word_embeddings false), and a binary head of a tanh pooler
  over the first token and a 2-way linear layer. Both use exact (erf) gelu and one epsilon for every norm.
- GeGLU (`activation: geglu`, the family default) has no counterpart there: MegatronBert's MLP is one
  up-projection; rope positions and per-head sizes other than hidden_size / heads have none either.
Padding differs in one place only: megatron-core also masks padded *queries* (a [b, 1, s, s] mask), Hugging Face
only padded keys, so the outputs at padded positions (which nothing reads) differ while every real token's are
the same. The vocabulary is cut back to the tokenizer's size (megatron pads it for TP alignment).
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..core.conversion import HFExportError, save_hf_checkpoint

PRETRAINING = "MegatronBertForPreTraining"
MASKED_LM = "MegatronBertForMaskedLM"


def hf_architecture(model: Mapping[str, Any]) -> str:
    """The Hugging Face class that computes exactly what `model` computes, or HFExportError with the reasons."""
    heads, hidden = int(model["num_attention_heads"]), int(model["hidden_size"])
    head_size = model.get("kv_channels") or hidden // heads
    activation = model.get("activation", "gelu")
    position = model.get("position_embedding_type", "learned_absolute")
    blockers = [
        reason
        for failed, reason in [
            (
                activation != "gelu",
                f"activation is {activation}: MegatronBert's MLP has one up-projection and no gate, so "
                "GeGLU has no Hugging Face form (train with activation: gelu to export)",
            ),
            (
                position != "learned_absolute",
                f"position_embedding_type is {position} (MegatronBert learns absolute positions)",
            ),
            (
                head_size * heads != hidden,
                f"kv_channels({head_size}) x heads({heads}) != hidden_size({hidden}) (MegatronBert ties them)",
            ),
        ]
        if failed
    ]
    if blockers:
        raise HFExportError(
            "no Hugging Face architecture computes this BERT exactly (BertForPreTraining is "
            "post-LayerNorm, megatron-core's BERT pre-LayerNorm; MegatronBert matches it but: "
            + "; ".join(blockers)
            + ")"
        )
    return PRETRAINING if model.get("bert_binary_head", True) else MASKED_LM


def export_hf(
    model: Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    out_dir,
    vocab_size: int,
    pad_id: int | None,
    dtype: torch.dtype | None = None,
) -> str:
    """Writes the checkpoint into out_dir (created; files of the same names replaced). Returns the class name.

    vocab_size: the tokenizer's vocabulary (rows kept of the padded tables); dtype: of the written tensors,
    default that of the state dict."""
    architecture = hf_architecture(model)
    tensors, config = _megatron_bert(model, state_dict, vocab_size, architecture == PRETRAINING)
    dtype = dtype or state_dict["embedding.word_embeddings.weight"].dtype
    config.update(architectures=[architecture], pad_token_id=pad_id, torch_dtype=str(dtype).replace("torch.", ""))
    save_hf_checkpoint(out_dir, tensors, config, dtype)
    return architecture


def write_hf_tokenizer(tokenizer, out_dir, lower_case: bool, max_length: int) -> None:
    """vocab.txt in id order (with any specials the trainer appended to the file's pieces) and the settings
    `AutoTokenizer` reads: BERT's WordPiece, lower-cased or not as in training."""
    out = Path(out_dir)
    pieces = [tokenizer.inv_vocab[i] for i in range(len(tokenizer.inv_vocab))]
    (out / "vocab.txt").write_text("".join(piece + "\n" for piece in pieces), encoding="utf-8")
    settings = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lower_case,
        "model_max_length": max_length,
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def _split_qkv(fused: torch.Tensor, heads: int, head_size: int):
    """megatron's linear_qkv rows are head-major, [q_h; k_h; v_h] for each head h: regroup into q, k and v."""
    per_head = fused.reshape(heads, 3, head_size, *fused.shape[1:])
    return [per_head[:, i].reshape(heads * head_size, *fused.shape[1:]) for i in range(3)]


def _megatron_bert(
    model: Mapping[str, Any], sd: Mapping[str, torch.Tensor], vocab: int, binary_head: bool
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    hidden, heads, layers = int(model["hidden_size"]), int(model["num_attention_heads"]), int(model["num_layers"])
    head_size = hidden // heads
    tied = bool(model.get("share_embeddings_and_output_weights", True))
    words = sd["embedding.word_embeddings.weight"]
    # Without the binary head megatron has no token types; zero rows add nothing, as none were trained.
    types = sd.get("embedding.tokentype_embeddings.weight", torch.zeros(2, hidden, dtype=words.dtype))
    out = {
        "bert.embeddings.word_embeddings.weight": words[:vocab],
        "bert.embeddings.position_embeddings.weight": sd["embedding.position_embeddings.weight"],
        "bert.embeddings.token_type_embeddings.weight": types,
        "bert.encoder.ln.weight": sd["encoder.final_layernorm.weight"],
        "bert.encoder.ln.bias": sd["encoder.final_layernorm.bias"],
        "cls.predictions.transform.dense.weight": sd["lm_head.dense.weight"],
        "cls.predictions.transform.dense.bias": sd["lm_head.dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": sd["lm_head.layer_norm.weight"],
        "cls.predictions.transform.LayerNorm.bias": sd["lm_head.layer_norm.bias"],
        "cls.predictions.bias": sd["output_layer.bias"][:vocab],
    }
    if not tied:
        out["cls.predictions.decoder.weight"] = sd["output_layer.weight"][:vocab]
    if binary_head:
        out.update(
            {
                "bert.pooler.dense.weight": sd["pooler.dense.weight"],
                "bert.pooler.dense.bias": sd["pooler.dense.bias"],
                "cls.seq_relationship.weight": sd["binary_head.weight"],
                "cls.seq_relationship.bias": sd["binary_head.bias"],
            }
        )
    for i in range(layers):
        src, dst = f"encoder.layers.{i}.", f"bert.encoder.layer.{i}."
        q, k, v = _split_qkv(sd[src + "self_attention.linear_qkv.weight"], heads, head_size)
        bq, bk, bv = _split_qkv(sd[src + "self_attention.linear_qkv.bias"], heads, head_size)
        out.update(
            {
                dst + "attention.ln.weight": sd[src + "input_layernorm.weight"],
                dst + "attention.ln.bias": sd[src + "input_layernorm.bias"],
                dst + "attention.self.query.weight": q,
                dst + "attention.self.query.bias": bq,
                dst + "attention.self.key.weight": k,
                dst + "attention.self.key.bias": bk,
                dst + "attention.self.value.weight": v,
                dst + "attention.self.value.bias": bv,
                dst + "attention.output.dense.weight": sd[src + "self_attention.linear_proj.weight"],
                dst + "attention.output.dense.bias": sd[src + "self_attention.linear_proj.bias"],
                dst + "ln.weight": sd[src + "pre_mlp_layernorm.weight"],
                dst + "ln.bias": sd[src + "pre_mlp_layernorm.bias"],
                dst + "intermediate.dense.weight": sd[src + "mlp.linear_fc1.weight"],
                dst + "intermediate.dense.bias": sd[src + "mlp.linear_fc1.bias"],
                dst + "output.dense.weight": sd[src + "mlp.linear_fc2.weight"],
                dst + "output.dense.bias": sd[src + "mlp.linear_fc2.bias"],
            }
        )
    config = {
        "model_type": "megatron-bert",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": int(model["ffn_hidden_size"]),
        "hidden_act": "gelu",
        "max_position_embeddings": int(model["max_position_embeddings"]),
        "type_vocab_size": int(types.shape[0]),
        "layer_norm_eps": float(model.get("layernorm_epsilon", 1e-5)),
        "initializer_range": float(model.get("init_method_std", 0.02)),
        "hidden_dropout_prob": float(model.get("hidden_dropout", 0.1)),
        "attention_probs_dropout_prob": float(model.get("attention_dropout", 0.1)),
        "tie_word_embeddings": tied,
        "position_embedding_type": "absolute",
    }
    return out, config
