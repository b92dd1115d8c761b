"""Scores of generated answers: SQuAD's exact match and F1, and exact_string_match for custom tasks.

    squad_scores(["Denver Broncos"], [["Denver Broncos", "The Broncos"]])   -> {"exact_match": 100.0, "f1": 100.0}
    exact_string_match(["yes "], ["yes"])                                      -> 100.0
    average_over_files({"a": (3, 100.0), "b": (1, 0.0)}, "micro")              -> 75.0

SQuAD v1.1's official evaluation script defines the numbers every paper reports, so this follows it step by
step: an answer is normalised (lower case, punctuation characters removed, the words a/an/the removed,
whitespace runs collapsed), exact match asks for equal normalised strings, F1 is the harmonic mean of
precision and recall of the normalised words counted as a multiset, each question takes its best score over
its reference answers, and the dataset's score is the mean over questions times 100. An empty prediction or
reference after normalisation has F1 0, as in the script. Standard library only: T5 and GPT jobs share it.
"""

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Literal

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation, in the script's order: the articles are matched after punctuation is gone,
    so "the-end" loses its hyphen first and keeps "theend" whole."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(reference)


def token_f1(prediction: str, reference: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """{"exact_match": %, "f1": %, "examples": n} over questions; references[i]: every accepted answer of question i."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} questions")
    if any(not answers for answers in references):
        raise ValueError("every question needs at least one reference answer")
    count = len(predictions)
    if count == 0:
        return {"exact_match": 0.0, "f1": 0.0, "examples": 0}
    em = sum(max(float(exact_match(p, a)) for a in answers) for p, answers in zip(predictions, references))
    f1 = sum(max(token_f1(p, a) for a in answers) for p, answers in zip(predictions, references))
    return {"exact_match": 100.0 * em / count, "f1": 100.0 * f1 / count, "examples": count}


def exact_string_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """% of predictions equal to their target once surrounding whitespace is stripped (no other normalisation:
    a custom task's labels may be case- or punctuation-sensitive)."""
    if len(predictions) != len(targets):
        raise ValueError(f"{len(predictions)} predictions for {len(targets)} targets")
    if not predictions:
        return 0.0
    return 100.0 * sum(p.strip() == t.strip() for p, t in zip(predictions, targets)) / len(predictions)


def average_over_files(scores: dict[str, tuple[int, float]], average: Literal["micro", "macro"] | None) -> float:
    """One score for several files, from {file label: (examples, score %)}: micro weighs every example alike,
    macro (and None) every file alike."""
    if not scores:
        return 0.0
    if average == "micro":
        total = sum(count for count, _ in scores.values())
        return sum(count * score for count, score in scores.values()) / total if total else 0.0
    return sum(score for _, score in scores.values()) / len(scores)
