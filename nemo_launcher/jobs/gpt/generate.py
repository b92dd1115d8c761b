"""Greedy text generation with a megatron-core GPTModel (one pipeline stage, any TP size).

    ids = greedy_generate(model, tokenizer.encode("Question: ..."), max_new_tokens=32, stop_id=tokenizer.eod,
                          vocab_size=tokenizer.vocab_size, max_length=2048)
    text = tokenizer.decode(ids)

Each new token reruns the whole sequence (no key/value cache). That is exactly the computation the model
was trained with, costs nothing extra to keep correct, and is quick for the short answers this serves;
megatron-core's inference contexts (a KV cache) are the step to take for long outputs.
"""

from collections.abc import Callable, Sequence

import torch


def _full_vocab_logits(logits: torch.Tensor) -> torch.Tensor:
    """With TP > 1 each rank holds a slice of the vocabulary; every rank needs all of it to pick the same token."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    if parallel_state.model_parallel_is_initialized() and parallel_state.get_tensor_model_parallel_world_size() > 1:
        return gather_from_tensor_model_parallel_region(logits)
    return logits


@torch.no_grad()
def greedy_generate(
    model: torch.nn.Module,
    prompt_ids: list[int],
    max_new_tokens: int,
    stop_id: int | None,
    vocab_size: int,
    max_length: int,
    prepare: Callable[[torch.Tensor], None] | None = None,
) -> list[int]:
    """The new token ids (without the prompt), ending before `stop_id` or after max_new_tokens.

    vocab_size: the tokenizer's; the embedding's padding rows are never chosen.
    max_length: the longest context the model takes (max_position_embeddings); longer contexts keep their end.
    prepare: called with each window of tokens before the model sees it (prompt learning places its virtual
    tokens there).
    """
    if not prompt_ids:
        raise ValueError("the prompt is empty: there is nothing to continue")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sequence = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    generated: list[int] = []
    try:
        for _ in range(max_new_tokens):
            window = sequence[:, -max_length:]
            positions = torch.arange(window.shape[1], device=device).unsqueeze(0)
            if prepare is not None:
                prepare(window)
            logits = _full_vocab_logits(model(window, positions, None))
            token = int(logits[0, -1, :vocab_size].float().argmax())
            if token == stop_id:
                break
            generated.append(token)
            sequence = torch.cat([sequence, torch.tensor([[token]], device=device)], dim=1)
    finally:
        model.train(was_training)
    return generated


@torch.no_grad()
def greedy_generate_batch(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    stop_id: int,
    vocab_size: int,
    max_length: int,
    prepare: Callable[[torch.Tensor], None] | None = None,
) -> list[list[int]]:
    """greedy_generate for several prompts at once: each row's new token ids (without its prompt).

    Rows are padded at the end. Causal attention keeps every position from seeing the ones after it, so the padding
    changes nothing a row computes up to its own last token, where its next token is read: each row gets what it
    would get alone. Every prompt plus max_new_tokens must fit in max_length (no window slides here).
    prepare: called with the [rows, width] tokens before each forward.
    """
    if not prompts or any(not ids for ids in prompts):
        raise ValueError("every prompt needs at least one token")
    longest = max(len(ids) for ids in prompts)
    if longest + max_new_tokens > max_length:
        raise ValueError(
            f"a prompt of {longest} tokens and {max_new_tokens} new ones exceed the {max_length} positions"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    rows = len(prompts)
    tokens = torch.full((rows, longest), stop_id, dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):
        tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
    lengths = [len(ids) for ids in prompts]
    generated: list[list[int]] = [[] for _ in prompts]
    running = set(range(rows))
    try:
        for _ in range(max_new_tokens):
            positions = torch.arange(tokens.shape[1], device=device).unsqueeze(0).expand_as(tokens)
            if prepare is not None:
                prepare(tokens)
            logits = _full_vocab_logits(model(tokens, positions, None))
            last = logits[torch.arange(rows, device=device), torch.tensor(lengths, device=device) - 1, :vocab_size]
            chosen = last.float().argmax(dim=-1).tolist()
            if max(lengths[row] for row in running) == tokens.shape[1]:
                tokens = torch.cat([tokens, torch.full((rows, 1), stop_id, dtype=torch.long, device=device)], dim=1)
            for row in sorted(running):
                if chosen[row] == stop_id:
                    running.discard(row)
                    continue
                tokens[row, lengths[row]] = chosen[row]
                lengths[row] += 1
                generated[row].append(chosen[row])
            if not running:
                break
    finally:
        model.train(was_training)
    return generated
