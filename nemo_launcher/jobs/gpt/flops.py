"""Model FLOPs per token and a GPU's peak, for model FLOPs utilization (MFU).

    flops = model_flops_per_token(cfg.model, padded_vocab)     # forward + backward, no recomputation
    mfu = tokens_per_sec * flops / (world_size * peak_bf16_flops(torch.cuda.get_device_name()))

The count is the usual 6N + attention: every weight of a matmul costs 2 FLOPs per token forward and 4
backward (6N, where N counts the transformer's linear weights and the output layer, not the embedding
lookup), plus the attention scores and their weighted sum, 2 x 2 x seq x (heads x head size) forward
per layer and twice that backward (12 L s d per token, PaLM appendix B). Activation recomputation is
not counted: MFU measures useful work, which is what makes it comparable across settings.
"""
from typing import Optional

from ...contract.schemas.gpt_training import ModelSection

# Dense bf16 tensor-core peaks, FLOP/s, from the vendors' data sheets (SXM parts unless the name says).
_PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),
)


def peak_bf16_flops(device_name: str) -> Optional[float]:
    """Peak of the named GPU (torch.cuda.get_device_name()), or None when it is not in the table."""
    for fragment, peak in _PEAK_BF16:
        if fragment.lower() in device_name.lower():
            return peak
    return None


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
