"""BERT's model FLOPs per token, for model FLOPs utilization (MFU; the GPUs' peaks are in core/flops.py).

    flops = model_flops_per_token(cfg.model, padded_vocab)     # forward + backward, no recomputation

The performance model's count (contract/performance/flops.py and shapes.py), as GPT's (gpt/flops.py): 6 FLOPs per
token for every matmul weight, the attention scores and their weighted sum, and BERT's own weights: the LM head's
dense layer (hidden x hidden) before the output layer, GeGLU's second up-projection, and the binary head's pooler
and classifier, which see one position a sample.
"""

import dataclasses

from ...contract.performance.flops import flops_per_token
from ...contract.performance.shapes import shape_of_model
from ...contract.schemas.bert_training import BertModelSection


def model_flops_per_token(model: BertModelSection, vocab_size: int) -> float:
    return flops_per_token(shape_of_model(dataclasses.asdict(model) | {"padded_vocab_size": vocab_size}))
