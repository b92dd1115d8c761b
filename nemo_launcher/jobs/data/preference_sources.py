"""Comparison jsonl files as people have them, read into tokenized comparisons. A line's keys say its format:

    pairs       {"prompt": str, "chosen": str, "rejected": str}
    ranked      {"prompt": str, "responses": [best, ..., worst]}        n responses -> n(n-1)/2 pairs
    text_pairs  {"text": prompt+good} then {"text": prompt+bad}          the seed's reward-model data, good first;
                                                                         the prompt is their common token prefix
    hh_rlhf     {"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": ...}   Anthropic HH-RLHF; the prompt
                                                                         is the dialogue up to and including its
                                                                         last "\\n\\nAssistant:"

    for record in read_comparisons(path, tokenizer, "auto", report_bad):   # report_bad(MalformedComparison)
        ...

A bad line is handed to `report_bad` (which raises to stop, or counts it and returns to go on), naming file:line.
Text pairs go by position: a good line's partner is the next line, so a broken line inside a pair drops the pair
(and with format text_pairs a broken line stands for the good text of a pair, so the next line is dropped with it
rather than taken for a good text: the pairs after it stay aligned).
"""

import gzip
import json
from collections.abc import Callable, Iterator

from ...contract.preference_data import Comparison
from .preference_records import MalformedComparison, TokenizedComparison, split_at_common_prefix, tokenize_comparison

HH_ASSISTANT = "\n\nAssistant:"
FORMAT_KEYS = {
    "pairs": '{"prompt", "chosen", "rejected"}',
    "ranked": '{"prompt", "responses": [best, ..., worst]}',
    "text_pairs": '{"text"} lines in pairs, good before bad',
    "hh_rlhf": '{"chosen", "rejected"} dialogues with "\\n\\nAssistant:" turns',
}


def line_format(record: dict, where: str) -> str:
    if "responses" in record:
        return "ranked"
    if "chosen" in record and "rejected" in record:
        return "pairs" if "prompt" in record else "hh_rlhf"
    if "text" in record:
        return "text_pairs"
    raise MalformedComparison(
        where, f"keys {sorted(record)} match no comparison format ({'; '.join(FORMAT_KEYS.values())})"
    )


def _text(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise MalformedComparison(where, f'"{key}" must be a string, got {type(value).__name__}')
    return value


def split_dialogue(text: str, where: str, which: str) -> tuple[str, str]:
    """(prompt up to and including the last assistant turn's marker, the assistant's answer)."""
    cut = text.rfind(HH_ASSISTANT)
    if cut < 0:
        raise MalformedComparison(where, f'the {which} dialogue has no "\\n\\nAssistant:" turn')
    cut += len(HH_ASSISTANT)
    return text[:cut], text[cut:]


def _comparison(kind: str, record: dict, where: str) -> Comparison:
    if kind == "pairs":
        return Comparison(
            _text(record, "prompt", where), (_text(record, "chosen", where), _text(record, "rejected", where))
        )
    if kind == "ranked":
        responses = record["responses"]
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise MalformedComparison(where, '"responses" must be a list of strings, best first')
        return Comparison(_text(record, "prompt", where), tuple(responses))
    prompt, chosen = split_dialogue(_text(record, "chosen", where), where, "chosen")
    other, rejected = split_dialogue(_text(record, "rejected", where), where, "rejected")
    if other != prompt:
        raise MalformedComparison(where, "the chosen and rejected dialogues differ before their last assistant turn")
    return Comparison(prompt, (chosen, rejected))


def _parse(line: str, where: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise MalformedComparison(where, f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise MalformedComparison(where, f"expected a JSON object, got {type(record).__name__}")
    return record


def read_comparisons(
    path: str, tokenizer, fmt: str, report_bad: Callable[[MalformedComparison], None]
) -> Iterator[TokenizedComparison]:
    pending: tuple[str, str | None] | None = None  # (where, good text; None: a broken line) of an unfinished pair
    # Data sets are often shipped compressed (HH-RLHF's train.jsonl.gz): .gz files are read as they are.
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = _parse(line, where)
                kind = line_format(record, where)
                if fmt not in ("auto", kind):
                    raise MalformedComparison(where, f"a {kind} line, but format={fmt} reads {FORMAT_KEYS[fmt]}")
            except MalformedComparison as error:
                report_bad(error)
                # An unusable line still takes its place among text pairs, so that good stays before bad after it:
                # it ends the pair waiting for it, or (format text_pairs) stands for the good text of the next.
                if pending is not None:
                    pending = None
                elif fmt == "text_pairs":
                    pending = (where, None)
                continue
            try:
                if kind == "text_pairs":
                    if pending is None:
                        pending = (where, None)  # a good line without a usable text still pairs with the next
                        pending = (where, _text(record, "text", where))
                        continue
                    (start, good), pending = pending, None
                    text = _text(record, "text", where)
                    if good is not None:
                        yield split_at_common_prefix(good, text, tokenizer, f"{start}-{number}")
                    continue
                if pending is not None:
                    (start, good), pending = pending, None
                    if good is not None:
                        report_bad(
                            MalformedComparison(start, 'a {"text"} line (the good text) without its bad text after it')
                        )
                yield tokenize_comparison(_comparison(kind, record, where), tokenizer, where)
            except MalformedComparison as error:
                report_bad(error)
    if pending is not None and pending[1] is not None:
        report_bad(MalformedComparison(pending[0], 'the last {"text"} line (a good text) has no bad text after it'))
