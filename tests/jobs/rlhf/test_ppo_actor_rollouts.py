"""Rollout sampling (jobs/rlhf/rollouts.py): the sampler's filters, seeded determinism, stop and length rules, and the
response log-probabilities, on a bigram model whose next-token distribution is known in closed form."""

import math

import torch

from nemo_launcher.jobs.rlhf.rollouts import RolloutBatch, TokenSampler, generate, per_response, response_logprobs

VOCAB, PADDED, EOD = 6, 8, 5


class Bigram(torch.nn.Module):
    """Logits of the next token depend on the current token only (a table), with GPTModel's call signature
    (tokens, positions, attention mask) -> [rows, width, padded vocab]."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, tokens, positions, attention_mask):
        return self.table[tokens]


def bigram(seed: int = 0) -> Bigram:
    table = torch.randn(PADDED, PADDED, generator=torch.Generator().manual_seed(seed))
    table[:, VOCAB:] = 10.0  # the padding rows are likeliest of all: they must still never be drawn
    return Bigram(table)


def draws(sampler: TokenSampler, logits: torch.Tensor, count: int, seed: int = 0) -> set[int]:
    generator = torch.Generator().manual_seed(seed)
    return {int(sampler.choose(logits, generator)[0]) for _ in range(count)}


def test_top_k_top_p_and_greedy_keep_the_tokens_they_should():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    assert draws(TokenSampler(), logits, 400) == {0, 1, 2, 3}
    assert draws(TokenSampler(top_k=2), logits, 200) == {0, 1}
    # top_p 0.8: 0.5 alone is short of it, 0.5 + 0.3 reaches it, so tokens 0 and 1 stay.
    assert draws(TokenSampler(top_p=0.8), logits, 200) == {0, 1}
    assert draws(TokenSampler(top_p=0.81), logits, 400) == {0, 1, 2}
    assert draws(TokenSampler(greedy=True), logits, 5) == {0}
    # A low temperature sharpens the distribution towards the mode.
    cold = TokenSampler(temperature=0.05)
    assert draws(cold, logits, 50) == {0}


def test_generation_is_fixed_by_the_generator_seed_and_obeys_stop_and_lengths():
    model = bigram()
    prompts = [[1, 2], [3], [0, 4, 1]]
    sampler = TokenSampler(temperature=1.5)

    def run(seed, **lengths):
        return generate(model, prompts, sampler, stop_id=EOD, vocab_size=VOCAB,
                        generator=torch.Generator().manual_seed(seed), **lengths)  # fmt: skip

    first = run(7, max_new_tokens=6, min_new_tokens=0)
    assert first.tokens == run(7, max_new_tokens=6, min_new_tokens=0).tokens
    assert [run(seed, max_new_tokens=6, min_new_tokens=0).tokens for seed in range(8)].count(first.tokens) < 8
    for batch in (first, run(3, max_new_tokens=4, min_new_tokens=3)):
        assert [row[: len(p)] for row, p in zip(batch.tokens, prompts, strict=True)] == prompts
        for response in batch.responses():
            assert all(token < VOCAB for token in response)
            assert EOD not in response[:-1]  # nothing follows the stop token
    for response in run(3, max_new_tokens=4, min_new_tokens=3).responses():
        assert 3 <= len(response) <= 4 and EOD not in response[:3]
    # Each row is what it would be alone: padding after a shorter row changes nothing (greedy removes the draw).
    greedy = TokenSampler(greedy=True)
    together = generate(model, prompts, greedy, 5, 0, EOD, VOCAB, torch.Generator())
    alone = [generate(model, [p], greedy, 5, 0, EOD, VOCAB, torch.Generator()).tokens[0] for p in prompts]
    assert together.tokens == alone


def test_response_logprobs_are_the_bigram_probabilities_of_the_response_tokens():
    model = bigram(1)
    batch = RolloutBatch(tokens=[[1, 2, 3, 4], [0, 5]], prompt_lengths=[2, 1])
    logp, logits = response_logprobs(model, batch, pad_id=0)
    table = torch.log_softmax(model.table.detach(), dim=-1)
    expected = [[table[2, 3], table[3, 4]], [table[0, 5], 0.0]]
    assert torch.allclose(logp.detach(), torch.tensor(expected), atol=1e-6)
    assert logits.shape == (2, 2, PADDED)
    assert batch.response_mask().tolist() == [[1.0, 1.0], [1.0, 0.0]]
    logp.sum().backward()  # the policy's update differentiates through them
    assert model.table.grad is not None and float(model.table.grad.abs().sum()) > 0


def test_per_response_picks_the_server_entries_of_each_response():
    batch = RolloutBatch(tokens=[[7, 7, 1, 2], [7, 3]], prompt_lengths=[2, 1])
    values = [[0.0, 0.1, 0.2, 0.3], [1.0, 1.1]]  # one entry per position
    # The state before response token j is position prompt_length - 1 + j.
    assert torch.allclose(per_response(values, batch, offset=1), torch.tensor([[0.1, 0.2], [1.0, 0.0]]))
    logprobs = [[-1.0, -2.0, -3.0], [-4.0]]  # entry t scores token t + 1
    assert torch.allclose(per_response(logprobs, batch, offset=1), torch.tensor([[-2.0, -3.0], [-4.0, 0.0]]))
    assert math.isclose(float(batch.response_mask().sum()), 3.0)
