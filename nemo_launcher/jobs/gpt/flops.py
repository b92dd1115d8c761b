"""GPT's model FLOPs per token, for model FLOPs utilization (MFU; the GPUs' peaks are in core/flops.py).

    flops = model_flops_per_token(cfg.model, padded_vocab)     # forward + backward, no recomputation

The count is the usual 6N + attention: every weight of a matmul costs 2 FLOPs per token forward and 4
backward (6N, where N counts the transformer's linear weights and the output layer, not the embedding
lookup), plus the attention scores and their weighted sum, 2 x 2 x seq x (heads x head size) forward
per layer and twice that backward (12 L s d per token, PaLM appendix B). Activation recomputation is
not counted: MFU measures useful work, which is what makes it comparable across settings.
"""

from ...contract.schemas.gpt_training import ModelSection


def model_flops_per_token(model: ModelSection, vocab_size: int) -> float:
    h = model.hidden_size
    head_size = model.kv_channels or h // model.num_attention_heads
    q_width = model.num_attention_heads * head_size
    kv_width = (model.num_query_groups or model.num_attention_heads) * head_size
    fc1_width = model.ffn_hidden_size * (2 if model.activation == "fast-swiglu" else 1)
    per_layer_weights = h * (q_width + 2 * kv_width) + q_width * h + h * fc1_width + model.ffn_hidden_size * h
    matmul_weights = model.num_layers * per_layer_weights + vocab_size * h
    attention = 12 * model.num_layers * model.encoder_seq_length * q_width
    return 6.0 * matmul_weights + attention
