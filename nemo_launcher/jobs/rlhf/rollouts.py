"""Rollouts: responses sampled from the policy for a batch of prompts, and the log-probabilities of their tokens.

    sampler = TokenSampler(temperature=1.0, top_k=0, top_p=1.0, greedy=False)
    batch = generate(model, prompts, sampler, max_new_tokens=8, min_new_tokens=1, stop_id=eod,
                     vocab_size=tokenizer.vocab_size, generator=torch.Generator().manual_seed(step_seed))
    logprobs = response_logprobs(model, batch)          # [rollouts, longest response], under the current policy

Sampling draws from an explicit torch.Generator, never from the global RNG: the actor seeds one per PPO step from the
run's seed and the step number, so the rollouts of step N are the same whether the run went there without a break or
resumed from a checkpoint (nothing else the process did before step N moves that stream).

A response is the tokens generated after the prompt up to and including the stop token (eod) when it comes (the stop
token is an action too, and the reward model scores the last token, which for the preference data is its eod), or
max_new_tokens tokens. Each new token reruns the whole sequence (no key/value cache), exactly the computation the
log-probabilities are later scored with; the short tiny-model responses make that cheap.
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenSampler:
    """How the next token is chosen: greedy (argmax), or drawn from softmax(logits / temperature) restricted to the
    top_k likeliest tokens (0: all) and to the smallest set whose probability reaches top_p (1.0: all)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    greedy: bool = False

    def choose(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One token per row of logits [rows, vocab] (float32 on any device); the draw happens on the CPU so the same
        generator gives the same tokens on a GPU run."""
        logits = logits.float().cpu()
        if self.greedy:
            return logits.argmax(dim=-1)
        logits = logits / self.temperature
        if 0 < self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            ordered, order = torch.sort(logits, dim=-1, descending=True)
            probs = torch.softmax(ordered, dim=-1)
            # Keep a token while the probability of the tokens before it is still short of top_p (the first always).
            before = torch.cumsum(probs, dim=-1) - probs
            drop_sorted = before >= self.top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class RolloutBatch:
    """Prompts and their responses: tokens[i] = prompt i then response i (unpadded)."""

    tokens: list[list[int]]
    prompt_lengths: list[int]

    @property
    def response_lengths(self) -> list[int]:
        return [len(row) - start for row, start in zip(self.tokens, self.prompt_lengths, strict=True)]

    def responses(self) -> list[list[int]]:
        return [row[start:] for row, start in zip(self.tokens, self.prompt_lengths, strict=True)]

    def response_mask(self) -> torch.Tensor:
        """[rollouts, longest response] float: 1.0 where the response has a token."""
        lengths = torch.tensor(self.response_lengths)
        width = max(1, int(lengths.max())) if len(lengths) else 1
        return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()

    def padded(self, pad_id: int, device=None) -> torch.Tensor:
        """[rollouts, longest sequence] tokens, right-padded with pad_id."""
        width = max(len(row) for row in self.tokens)
        out = torch.full((len(self.tokens), width), pad_id, dtype=torch.long)
        for i, row in enumerate(self.tokens):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out.to(device) if device is not None else out

    def select(self, rows: Sequence[int]) -> "RolloutBatch":
        return RolloutBatch([self.tokens[i] for i in rows], [self.prompt_lengths[i] for i in rows])


def per_response(rows: Sequence[Sequence[float]], batch: RolloutBatch, offset: int) -> torch.Tensor:
    """A server's per-position lists (entry t belongs to position t of tokens[i]) cut to the response: entry j of the
    result is the list's entry prompt_length - offset + j (offset 1: the entry of the position before each response
    token, i.e. the state it was chosen in). [rollouts, longest response] float32, 0 in the padding."""
    mask = batch.response_mask()
    out = torch.zeros_like(mask)
    for i, (row, start, length) in enumerate(zip(rows, batch.prompt_lengths, batch.response_lengths, strict=True)):
        first = start - offset
        picked = row[first : first + length]
        if len(picked) != length:
            raise ValueError(
                f"rollout {i}: {len(row)} entries, but its response needs positions {first}..{first + length - 1}"
            )
        out[i, :length] = torch.tensor(picked, dtype=torch.float32)
    return out


def step_generator(seed: int, step: int, purpose: str) -> torch.Generator:
    """A generator of its own for each step and purpose: what it draws depends on nothing else the run did."""
    return torch.Generator().manual_seed(hash_seed(f"{seed}-{step}-{purpose}"))


def hash_seed(text: str) -> int:
    # random.Random seeds a str from its SHA-512: the same number in every process, whatever PYTHONHASHSEED says.
    return random.Random(text).getrandbits(63)


def full_vocab_logits(logits: torch.Tensor) -> torch.Tensor:
    """With TP > 1 each rank holds a slice of the vocabulary; sampling and log-probabilities need all of it (the
    gather passes gradients back to each rank's slice)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    if parallel_state.model_parallel_is_initialized() and parallel_state.get_tensor_model_parallel_world_size() > 1:
        return gather_from_tensor_model_parallel_region(logits)
    return logits


def forward_logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary logits [rows, width, padded vocab] of right-padded tokens (causal attention: a position never
    sees the padding after it)."""
    positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)
    return full_vocab_logits(model(tokens, positions, None))


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    sampler: TokenSampler,
    max_new_tokens: int,
    min_new_tokens: int,
    stop_id: int,
    vocab_size: int,
    generator: torch.Generator,
) -> RolloutBatch:
    """Samples one response per prompt. The embedding's padding rows (ids >= vocab_size) are never chosen, nor the
    stop token before min_new_tokens tokens."""
    if not prompts or any(not ids for ids in prompts):
        raise ValueError("every prompt needs at least one token")
    device = next(model.parameters()).device
    rows = len(prompts)
    tokens = [list(ids) for ids in prompts]
    running = list(range(rows))
    for produced in range(max_new_tokens):
        batch = RolloutBatch([tokens[i] for i in running], [0] * len(running))
        logits = forward_logits(model, batch.padded(stop_id, device))
        last = torch.tensor([len(tokens[i]) - 1 for i in running], device=device)
        step_logits = logits[torch.arange(len(running), device=device), last, :vocab_size].float()
        if produced < min_new_tokens and 0 <= stop_id < vocab_size:
            step_logits[:, stop_id] = float("-inf")
        chosen = sampler.choose(step_logits, generator).tolist()
        for row, token in zip(running, chosen, strict=True):
            tokens[row].append(int(token))
        running = [row for row, token in zip(running, chosen, strict=True) if token != stop_id]
        if not running:
            break
    return RolloutBatch(tokens, [len(ids) for ids in prompts])


def response_logprobs(model: torch.nn.Module, batch: RolloutBatch, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(token | before) of every response token [rollouts, longest response], the full-vocabulary logits of
    the positions that chose them [rollouts, longest response, vocab]) under `model`, with gradients when enabled.
    Padding positions hold 0 log-probability; the caller masks them."""
    device = next(model.parameters()).device
    tokens = batch.padded(pad_id, device)
    logits = forward_logits(model, tokens)
    mask = batch.response_mask()
    width = mask.shape[1]
    # Response token j of row i sits at prompt_length + j; the logits that chose it at the position before.
    starts = torch.tensor(batch.prompt_lengths, device=device)
    chooser = (starts.unsqueeze(1) - 1 + torch.arange(width, device=device).unsqueeze(0)).clamp(max=tokens.shape[1] - 2)
    rows = torch.arange(tokens.shape[0], device=device).unsqueeze(1)
    chosen_logits = logits[rows, chooser]
    targets = tokens[rows, chooser + 1]
    logp = torch.log_softmax(chosen_logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp * mask.to(device), chosen_logits
