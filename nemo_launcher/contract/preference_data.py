"""Preference data as the RLHF stages read it: comparison pairs and prompts, tokenized once by data preparation.

    <dir>/<split>_pairs.jsonl     {"prompt": [ids], "chosen": [ids], "rejected": [ids]}  one comparison per line
    <dir>/<split>_prompts.jsonl   {"prompt": [ids], "text": "..."}                       PPO's prompts
    <dir>/metadata.json           the tokenizer the ids come from, counts, and how the set was made

A sample's tokens are its prompt then its response; the response tokens are the ones a loss or a reward reads (the
response mask is "position >= len(prompt)"). The chosen and rejected responses of a pair stay one record, so a
micro-batch always holds both (the pairwise losses need them together, and with pipeline parallelism a pair cannot be
split across micro-batches). A DPO run's reference log-probabilities are written by its own job as a copy of the
pairs file with two more fields per line ("ref_chosen", "ref_rejected": summed response log-probabilities).

The tiny set (`tiny_preferences`) follows one rule a 2-layer model learns in a few dozen steps: a response is better
the larger its share of words from AGREEABLE (single tokens of the repository's tiny BPE); chance is 50%.
Torch-free: the launcher names these files when it checks a pipeline, the jobs read and write them.
"""

import random
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")
PAIRS_SUFFIX = "_pairs.jsonl"
PROMPTS_SUFFIX = "_prompts.jsonl"
METADATA_FILE = "metadata.json"
REFERENCE_FIELDS = ("ref_chosen", "ref_rejected")

# Whole words that are one token each in corpora/tiny_bpe (a BPE trained on licence texts).
AGREEABLE = (
    "accept",
    "agree",
    "allow",
    "clear",
    "free",
    "useful",
    "valid",
    "proper",
    "suitable",
    "reasonable",
    "protect",
    "support",
)
DISAGREEABLE = (
    "cannot",
    "damages",
    "liability",
    "limitation",
    "disclaim",
    "terminate",
    "infringe",
    "restrictions",
    "except",
    "without",
    "against",
    "claims",
)
TOPICS = ("software", "license", "code", "data", "library", "program", "network", "document", "system", "version")
RULE = (
    "a response is better the larger its share of words from the agreeable list "
    f"({', '.join(AGREEABLE[:4])}, ...) against the disagreeable one ({', '.join(DISAGREEABLE[:4])}, ...)"
)


def pairs_file(directory: str, split: str) -> str:
    return f"{directory}/{split}{PAIRS_SUFFIX}"


def prompts_file(directory: str, split: str) -> str:
    return f"{directory}/{split}{PROMPTS_SUFFIX}"


@dataclass(frozen=True)
class Comparison:
    """One prompt and its responses, best first (two or more: a ranked list is expanded into pairs)."""

    prompt: str
    responses: tuple[str, ...]

    def pairs(self) -> list[tuple[str, str]]:
        """(chosen, rejected) for every better-worse pair of the ranking: n responses give n(n-1)/2 pairs."""
        ranked = self.responses
        return [(ranked[i], ranked[j]) for i in range(len(ranked)) for j in range(i + 1, len(ranked))]


def agreeable_share(response: str) -> float:
    words = response.split()
    return sum(word.strip(".,") in AGREEABLE for word in words) / max(1, len(words))


def tiny_comparisons(count: int, seed: int, responses_per_prompt: int = 2, words: int = 6) -> list[Comparison]:
    """`count` prompts, each with `responses_per_prompt` responses of `words` words ranked by the rule (their agreeable
    shares differ by at least two words between neighbours, so the ranking is never a coin toss)."""
    assert 2 <= responses_per_prompt and 2 * (responses_per_prompt - 1) <= words, (responses_per_prompt, words)
    rng = random.Random(seed)
    comparisons = []
    for _ in range(count):
        topic = rng.choice(TOPICS)
        top = rng.randint(2 * (responses_per_prompt - 1), words)  # agreeable words of the best response
        counts = [top - 2 * rank for rank in range(responses_per_prompt)]
        responses = []
        for agreeable in counts:
            chosen = [rng.choice(AGREEABLE) for _ in range(agreeable)] + [
                rng.choice(DISAGREEABLE) for _ in range(words - agreeable)
            ]
            rng.shuffle(chosen)
            responses.append(" " + " ".join(chosen))
        comparisons.append(Comparison(f"Question about the {topic}. Answer:", tuple(responses)))
    return comparisons


def tiny_prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Question about the {rng.choice(TOPICS)}. Answer:" for _ in range(count)]
