"""A GPU's peak FLOP/s, for model FLOPs utilization (MFU) with a recipe's FLOPs per token.

mfu = (tokens_per_sec * recipe.flops_per_token(model, vocab)
       / (world_size * peak_bf16_flops(torch.cuda.get_device_name())))
"""

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


def peak_bf16_flops(device_name: str) -> float | None:
    """Peak of the named GPU (torch.cuda.get_device_name()), or None when it is not in the table."""
    for fragment, peak in _PEAK_BF16:
        if fragment.lower() in device_name.lower():
            return peak
    return None
