"""BERT's model FLOPs per token, for model FLOPs utilization (MFU; the GPUs' peaks are in core/flops.py).

    flops = model_flops_per_token(cfg.model, padded_vocab)     # forward + backward, no recomputation

Counted as GPT's (gpt/flops.py): 6 FLOPs per token for every matmul weight, forward and backward, plus the
attention scores and their weighted sum, 12 x layers x sequence x (heads x head size). BERT's own weights: the
LM head's dense layer (hidden x hidden) before the output layer, and GeGLU's second up-projection. The pooler and
the binary head see one token per sample and are left out.
"""

from ...contract.schemas.bert_training import BertModelSection


def model_flops_per_token(model: BertModelSection, vocab_size: int) -> float:
    h = model.hidden_size
    width = model.num_attention_heads * (model.kv_channels or h // model.num_attention_heads)
    fc1_width = model.ffn_hidden_size * (2 if model.activation == "geglu" else 1)
    per_layer_weights = 3 * h * width + width * h + h * fc1_width + model.ffn_hidden_size * h
    matmul_weights = model.num_layers * per_layer_weights + h * h + vocab_size * h
    attention = 12 * model.num_layers * model.encoder_seq_length * width
    return 6.0 * matmul_weights + attention
