"""A GPU's peak FLOP/s, for model FLOPs utilization (MFU) with a recipe's FLOPs per token.

mfu = (tokens_per_sec * recipe.flops_per_token(model, vocab)
       / (world_size * peak_bf16_flops(torch.cuda.get_device_name())))

The table of peaks lives in the torch-free performance model (contract/performance/gpus.py), which the launcher's
predictions divide by too, so a measured MFU and a predicted one share their denominator.
"""

from ...contract.performance.gpus import peak_bf16_flops

__all__ = ["peak_bf16_flops"]
