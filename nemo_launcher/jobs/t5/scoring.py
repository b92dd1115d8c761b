"""Generated answers scored by a text-pair metric, with the totals summed over the ranks that share the questions.

    examples, scores = score_answers("squad", predictions, pairs)      # scores: {"exact_match": %, "f1": %}
    examples, scores = score_answers("exact_string_match", predictions, pairs, sum_over_ranks)

`pairs` are text_pairs records (each with its accepted "answers" and its "target"); `sum_over_ranks` adds a list of
per-rank totals over the data-parallel ranks (the identity in one process).
"""

from collections.abc import Callable, Sequence

from ..common.qa_metrics import exact_string_match, squad_scores

SCORE_NAMES = {"squad": ("exact_match", "f1"), "exact_string_match": ("exact_string_match",)}


def per_rank_scores(metric: str, predictions: Sequence[str], pairs: Sequence[dict]) -> dict[str, float]:
    if metric == "squad":
        return squad_scores(predictions, [pair["answers"] for pair in pairs])
    return {"exact_string_match": exact_string_match(predictions, [pair["target"] for pair in pairs])}


def score_answers(
    metric: str,
    predictions: Sequence[str],
    pairs: Sequence[dict],
    sum_over_ranks: Callable[[list[float]], list[float]] | None = None,
) -> tuple[int, dict[str, float]]:
    """(questions scored over all ranks, {score name: %})."""
    names = SCORE_NAMES[metric]
    local = per_rank_scores(metric, predictions, pairs)
    count = len(predictions)
    totals = [local[name] * count / 100.0 for name in names] + [float(count)]
    if sum_over_ranks is not None:
        totals = sum_over_ranks(totals)
    *sums, total = totals
    return int(total), {name: 100.0 * value / total if total else 0.0 for name, value in zip(names, sums)}
