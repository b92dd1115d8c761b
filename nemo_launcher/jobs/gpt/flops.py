"""GPT's model FLOPs per token, for model FLOPs utilization (MFU; the GPUs' peaks are in core/flops.py).

    flops = model_flops_per_token(cfg.model, padded_vocab)     # forward + backward, no recomputation

The count is the performance model's (contract/performance/flops.py), so the MFU a job logs and the one the launcher
predicted use one formula: every matmul weight costs 6 FLOPs per token forward and backward (top-k experts' MLPs
with MoE, the router, GQA's narrower keys and values, SwiGLU's third matrix), plus the attention scores and their
weighted sum, 12 x layers x sequence x (heads x head size), plus the output layer. Recomputation is not counted:
MFU measures useful work, which is what makes it comparable across settings.
"""

import dataclasses

from ...contract.performance.flops import flops_per_token
from ...contract.performance.shapes import shape_of_model
from ...contract.schemas.gpt_training import ModelSection


def model_flops_per_token(model: ModelSection, vocab_size: int) -> float:
    return flops_per_token(shape_of_model(dataclasses.asdict(model) | {"padded_vocab_size": vocab_size}))
