"""Greedy decoding with a megatron-core T5Model (one pipeline stage, any TP size), several sources at once.

    answers = greedy_answers(model, [tokenizer.encode("question: ... context: ...")], tokenizer, max_new_tokens=32)
    texts = [tokenizer.decode(ids) for ids in answers]

The encoder runs once per batch; the decoder then reruns its whole prefix for each new token (no key/value cache),
which is exactly the computation the model was trained with and is quick for short answers. Sources are padded
to the batch's longest with the pad id and hidden from every attention by the padding mask, so an answer does
not depend on the other sources of its batch. A row stops at eos; the batch stops when every row has.
"""

from collections.abc import Sequence

import torch


def _full_vocab_logits(logits: torch.Tensor) -> torch.Tensor:
    """With TP > 1 each rank holds a slice of the vocabulary; every rank needs all of it to pick the same token."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    if parallel_state.model_parallel_is_initialized() and parallel_state.get_tensor_model_parallel_world_size() > 1:
        return gather_from_tensor_model_parallel_region(logits)
    return logits


def inference_ready(model: torch.nn.Module) -> torch.nn.Module:
    """A model built in bf16/fp16 inside megatron's Float16Module, which casts every parameter (norms too) and the
    inputs as training does; without it the local spec mixes fp32 and half-precision tensors. fp32 as it is."""
    if not (model.config.bf16 or model.config.fp16):
        return model
    from megatron.core.transformer.module import Float16Module

    return Float16Module(model.config, model).eval()


def encoder_batch(sources: Sequence[Sequence[int]], pad_id: int, device) -> tuple:
    """(ids [b, longest], padding mask [b, longest] with 1 for a token) of sources padded at the end."""
    longest = max(len(ids) for ids in sources)
    ids = torch.full((len(sources), longest), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(sources), longest), dtype=torch.long, device=device)
    for row, source in enumerate(sources):
        ids[row, : len(source)] = torch.tensor(list(source), dtype=torch.long, device=device)
        mask[row, : len(source)] = 1
    return ids, mask


@torch.no_grad()
def greedy_answers(
    model: torch.nn.Module, sources: Sequence[Sequence[int]], tokenizer, max_new_tokens: int
) -> list[list[int]]:
    """The generated token ids of each source (without bos and eos), at most max_new_tokens each.

    tokenizer: T5's (bos starts the decoder, eos ends an answer, pad fills; vocab_size: padding rows of the
    embedding are never chosen).
    """
    from .recipe import attention_masks

    if not sources or any(len(ids) == 0 for ids in sources):
        raise ValueError("every source needs at least one token")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    encoder_ids, encoder_mask = encoder_batch(sources, tokenizer.pad, device)
    rows = len(sources)
    decoder_ids = torch.full((rows, 1), tokenizer.bos, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    te_masks = getattr(model, "transformer_engine_masks", False)
    try:
        encoder_masks = attention_masks({"enc_mask": encoder_mask, "dec_mask": torch.ones_like(decoder_ids)}, te_masks)
        hidden = model(encoder_ids, None, encoder_masks[0], None, None, output_encoder_hidden_only=True)
        # Float16Module hands outputs back in fp32 but casts only positional inputs: back to the weights' dtype.
        hidden = hidden.to(next(model.parameters()).dtype)
        for _ in range(max_new_tokens):
            masks = attention_masks({"enc_mask": encoder_mask, "dec_mask": torch.ones_like(decoder_ids)}, te_masks)
            logits = _full_vocab_logits(model(encoder_ids, decoder_ids, *masks, encoder_hidden_states=hidden))
            token = logits[:, -1, : tokenizer.vocab_size].float().argmax(dim=-1)
            token = torch.where(finished, torch.full_like(token, tokenizer.pad), token)
            finished |= token == tokenizer.eos
            decoder_ids = torch.cat([decoder_ids, token[:, None]], dim=1)
            if bool(finished.all()):
                break
    finally:
        model.train(was_training)
    answers = []
    for row in decoder_ids[:, 1:].tolist():
        answers.append(row[: row.index(tokenizer.eos)] if tokenizer.eos in row else row)
    return answers
