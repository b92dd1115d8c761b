"""One comparison in token ids: a prompt and its responses best first, each response ending with the tokenizer's
end-of-document id, as the pairs files of contract/preference_data.py hold them.

    record = tokenize_comparison(Comparison(prompt, (best, worse)), tokenizer, "train.jsonl:7")
    record.pairs()          # [(chosen ids, rejected ids), ...]: n responses give n(n-1)/2 pairs
    split_at_common_prefix(good_text, bad_text, tokenizer, "seed.jsonl:3")   # the seed's {"text"} line pairs

The prompt and each response are tokenized apart (never the joined text), so a response's ids are the ones a
policy generates after the prompt's last token, and every pair of a ranking shares one prompt.
"""

from dataclasses import dataclass

from ...contract.preference_data import Comparison
from ..common.errors import DataPrepError


class MalformedComparison(DataPrepError):
    """An input line that is not a usable comparison; `where` is file:line."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class TokenizedComparison:
    prompt_text: str
    prompt: list[int]
    response_texts: tuple[str, ...]  # best first
    responses: tuple[list[int], ...]  # the same, tokenized, each ending with eod
    source: str  # file:line (or the generator) it came from

    def pairs(self) -> list[tuple[list[int], list[int]]]:
        ranked = self.responses
        return [(ranked[i], ranked[j]) for i in range(len(ranked)) for j in range(i + 1, len(ranked))]


def tokenize_comparison(comparison: Comparison, tokenizer, source: str) -> TokenizedComparison:
    """Refuses an empty prompt or response, and a ranking that repeats a response (a pair of equal texts teaches
    nothing and contradicts itself)."""
    if not comparison.prompt:
        raise MalformedComparison(source, "the prompt is empty")
    if len(comparison.responses) < 2:
        raise MalformedComparison(source, f"{len(comparison.responses)} response(s): a comparison needs at least 2")
    for index, response in enumerate(comparison.responses):
        if not response:
            raise MalformedComparison(source, f"response {index + 1} is empty")
    if len(set(comparison.responses)) != len(comparison.responses):
        raise MalformedComparison(source, "the same response appears twice (chosen and rejected must differ)")
    return TokenizedComparison(
        prompt_text=comparison.prompt,
        prompt=tokenizer.encode(comparison.prompt),
        response_texts=comparison.responses,
        responses=tuple(tokenizer.encode(text) + [tokenizer.eod] for text in comparison.responses),
        source=source,
    )


def split_at_common_prefix(good: str, bad: str, tokenizer, source: str) -> TokenizedComparison:
    """The seed's reward-model data is prompt+good and prompt+bad as whole texts: the prompt is their longest common
    prefix of token ids, the responses what follows it in each."""
    good_ids, bad_ids = tokenizer.encode(good), tokenizer.encode(bad)
    if good_ids == bad_ids:
        raise MalformedComparison(source, "the good and the bad text are identical")
    shared = 0
    for a, b in zip(good_ids, bad_ids):
        if a != b:
            break
        shared += 1
    if shared == 0:
        raise MalformedComparison(source, "the good and the bad text have no common prefix: no prompt to split off")
    if shared in (len(good_ids), len(bad_ids)):
        which = "good" if shared == len(good_ids) else "bad"
        raise MalformedComparison(source, f"the {which} text is a prefix of the other: it has no response of its own")
    return TokenizedComparison(
        prompt_text=tokenizer.decode(good_ids[:shared]),
        prompt=good_ids[:shared],
        response_texts=(tokenizer.decode(good_ids[shared:]), tokenizer.decode(bad_ids[shared:])),
        responses=(good_ids[shared:] + [tokenizer.eod], bad_ids[shared:] + [tokenizer.eod]),
        source=source,
    )
