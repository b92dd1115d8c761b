"""megatron-core's local core attention, taught to add the bias that T5's relative positions give each head.

    core_attention = BiasedDotProductAttention          # in the local layer spec of T5's self-attention

megatron-core 0.16's T5Model computes the relative-position bias once per stack, scatters its heads over the
tensor-parallel ranks and passes it to every self-attention layer; Transformer Engine adds it after scaling
(`post_scale_bias`), but the local DotProductAttention asserts that no bias comes, so a T5 with relative
positions cannot run on a CPU. This subclass keeps megatron's attention as it is and adds the bias to the
scaled scores just before the masked softmax, which is where Transformer Engine adds it too.
"""

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention


class _ScoresPlusBias(torch.nn.Module):
    """Wraps megatron's FusedScaleMaskSoftmax: scores + the pending bias, then the masked softmax."""

    def __init__(self, softmax: torch.nn.Module):
        super().__init__()
        self.softmax = softmax
        self.pending_bias: torch.Tensor | None = None  # [1, heads of this rank, sq, sk]; set per call

    def forward(self, scores, mask, *rest):
        if self.pending_bias is not None:
            scores = scores + self.pending_bias.to(scores.dtype)
        return self.softmax(scores, mask, *rest)


class BiasedDotProductAttention(DotProductAttention):
    """DotProductAttention that accepts `attention_bias` (relative positions), added after the 1/sqrt(d) scaling."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale_mask_softmax = _ScoresPlusBias(self.scale_mask_softmax)

    def forward(
        self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
    ):
        self.scale_mask_softmax.pending_bias = attention_bias
        try:
            return super().forward(
                query,
                key,
                value,
                attention_mask,
                attn_mask_type=attn_mask_type,
                attention_bias=None,
                packed_seq_params=packed_seq_params,
            )
        finally:
            self.scale_mask_softmax.pending_bias = None
