"""Comparison files in each input format read into tokenized comparisons (jobs/data/preference_sources.py), and each
kind of bad line refused with its file and line number."""

import gzip
import json

import pytest

from nemo_launcher.jobs.common.tokenizer import load_tokenizer
from nemo_launcher.jobs.data.preference_records import MalformedComparison
from nemo_launcher.jobs.data.preference_sources import read_comparisons

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)

PROMPT = "Question about the code. Answer:"
DIALOGUE = "\n\nHuman: Is this licence free?\n\nAssistant: Which one?\n\nHuman: The MIT one.\n\nAssistant:"


@pytest.fixture(scope="module")
def tokenizer(tiny_bpe_files):  # noqa: F811
    return load_tokenizer("megatron", "GPT2BPETokenizer", None, *tiny_bpe_files)


def _write(path, lines) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def _raise(error):
    raise error


def _read(path, tokenizer, fmt="auto"):
    return list(read_comparisons(path, tokenizer, fmt, _raise))


def _refusal(tmp_path, tokenizer, lines, fmt="auto") -> str:
    with pytest.raises(MalformedComparison) as caught:
        _read(_write(tmp_path / "bad.jsonl", lines), tokenizer, fmt)
    return str(caught.value)


def test_prompt_chosen_rejected_lines_tokenize_prompt_and_responses_apart(tmp_path, tokenizer):
    path = _write(tmp_path / "pairs.jsonl", [{"prompt": PROMPT, "chosen": " agree valid", "rejected": " cannot"}])
    (record,) = _read(path, tokenizer)
    assert record.prompt == tokenizer.encode(PROMPT)
    assert record.pairs() == [
        (tokenizer.encode(" agree valid") + [tokenizer.eod], tokenizer.encode(" cannot") + [tokenizer.eod])
    ]
    assert (record.prompt_text, record.response_texts) == (PROMPT, (" agree valid", " cannot"))
    assert record.source == f"{path}:1"


def test_a_ranked_list_of_three_responses_gives_its_three_pairs_best_first(tmp_path, tokenizer):
    ranked = [" agree agree", " agree cannot", " cannot cannot"]
    path = _write(tmp_path / "ranked.jsonl", [{"prompt": PROMPT, "responses": ranked}])
    (record,) = _read(path, tokenizer)
    ids = [tokenizer.encode(text) + [tokenizer.eod] for text in ranked]
    assert record.pairs() == [(ids[0], ids[1]), (ids[0], ids[2]), (ids[1], ids[2])]


def test_the_seeds_text_pairs_split_at_their_longest_common_token_prefix(tmp_path, tokenizer):
    good, bad = f"{PROMPT} agree free valid", f"{PROMPT} without claims"
    path = _write(tmp_path / "seed.jsonl", [{"text": good}, {"text": bad}, {"text": good + " support"}, {"text": bad}])
    first, second = _read(path, tokenizer)
    good_ids, bad_ids = tokenizer.encode(good), tokenizer.encode(bad)
    shared = next(i for i, (a, b) in enumerate(zip(good_ids, bad_ids)) if a != b)
    assert shared >= len(tokenizer.encode(PROMPT))  # the whole prompt at least
    assert first.prompt == good_ids[:shared] == bad_ids[:shared]
    assert first.pairs() == [(good_ids[shared:] + [tokenizer.eod], bad_ids[shared:] + [tokenizer.eod])]
    # Prompt and response put together give the texts back, and the pair names both of its lines.
    assert first.prompt_text + first.response_texts[0] == good and first.prompt_text + first.response_texts[1] == bad
    assert (first.source, second.source) == (f"{path}:1-2", f"{path}:3-4")


def test_hh_rlhf_dialogues_split_after_the_last_assistant_turn(tmp_path, tokenizer):
    line = {"chosen": DIALOGUE + " Yes, it is.", "rejected": DIALOGUE + " No idea."}
    path = tmp_path / "train.jsonl.gz"  # HH-RLHF ships gzipped jsonl: read as it is
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    (record,) = _read(str(path), tokenizer)
    assert record.prompt_text == DIALOGUE and record.prompt == tokenizer.encode(DIALOGUE)
    assert record.response_texts == (" Yes, it is.", " No idea.")


def test_formats_mix_in_one_file_and_blank_lines_are_passed_over(tmp_path, tokenizer):
    lines = [
        {"prompt": PROMPT, "chosen": " agree", "rejected": " cannot"},
        "",
        {"text": f"{PROMPT} agree"},
        {"text": f"{PROMPT} cannot"},
        {"prompt": PROMPT, "responses": [" a", " b", " c"]},
        {"chosen": DIALOGUE + " yes", "rejected": DIALOGUE + " no"},
    ]
    records = _read(_write(tmp_path / "mixed.jsonl", lines), tokenizer)
    assert [len(record.pairs()) for record in records] == [1, 1, 3, 1]
    assert [record.source.rsplit(":", 1)[1] for record in records] == ["1", "3-4", "5", "6"]


@pytest.mark.parametrize(
    "lines, words",
    [
        ([{"text": f"{PROMPT} a"}, {"text": f"{PROMPT} a"}], "bad.jsonl:1-2: the good and the bad text are identical"),
        ([{"text": "agree"}, {"text": "cannot"}], "bad.jsonl:1-2: the good and the bad text have no common prefix"),
        ([{"text": f"{PROMPT} agree"}, {"text": f"{PROMPT} agree more"}], "bad.jsonl:1-2: the good text is a prefix"),
        ([{"prompt": PROMPT, "chosen": " a", "rejected": " a"}], "bad.jsonl:1: the same response appears twice"),
        ([{"prompt": PROMPT, "chosen": " a", "rejected": " b"}, {"text": "x a"}], 'bad.jsonl:2: the last {"text"}'),
        ([{"text": "x a"}, {"prompt": PROMPT, "chosen": " a", "rejected": " b"}], 'bad.jsonl:1: a {"text"} line'),
        ([{"prompt": PROMPT, "responses": [" only"]}], "bad.jsonl:1: 1 response(s): a comparison needs at least 2"),
        ([{"prompt": "", "chosen": " a", "rejected": " b"}], "bad.jsonl:1: the prompt is empty"),
        ([{"prompt": PROMPT, "chosen": 3, "rejected": " b"}], 'bad.jsonl:1: "chosen" must be a string, got int'),
        ([{"question": "q", "answer": "a"}], "bad.jsonl:1: keys ['answer', 'question'] match no comparison format"),
        (["{not json"], "bad.jsonl:1: not JSON"),
        ([[1, 2]], "bad.jsonl:1: expected a JSON object, got list"),
        ([{"chosen": "Human: hi Assistant: yes", "rejected": "no"}], 'bad.jsonl:1: the chosen dialogue has no "\\n\\n'),
        (
            [{"chosen": DIALOGUE + " yes", "rejected": "\n\nHuman: other\n\nAssistant: no"}],
            "bad.jsonl:1: the chosen and rejected dialogues differ before their last assistant turn",
        ),
    ],
)
def test_a_bad_line_is_refused_naming_its_line(lines, words, tmp_path, tokenizer):
    message = _refusal(tmp_path, tokenizer, lines)
    assert words in message, message


def test_a_set_format_refuses_lines_of_another(tmp_path, tokenizer):
    message = _refusal(tmp_path, tokenizer, [{"prompt": PROMPT, "responses": [" a", " b"]}], fmt="pairs")
    assert "bad.jsonl:1: a ranked line, but format=pairs reads" in message


def test_skipping_bad_lines_keeps_the_seeds_text_pairs_aligned(tmp_path, tokenizer):
    """A broken good text drops its bad partner too: otherwise every later pair would swap good and bad."""
    lines = ["{broken", {"text": f"{PROMPT} cannot"}, {"text": f"{PROMPT} agree"}, {"text": f"{PROMPT} without"}]
    path = _write(tmp_path / "seed.jsonl", lines)
    bad = []
    records = list(read_comparisons(path, tokenizer, "text_pairs", bad.append))
    assert [str(error).split(": ")[0] for error in bad] == [f"{path}:1"]
    (record,) = records
    assert record.response_texts == (" agree", " without") and record.source == f"{path}:3-4"


def test_a_line_of_another_format_among_text_pairs_takes_the_bad_texts_place(tmp_path, tokenizer):
    lines = [
        {"text": f"{PROMPT} agree"},
        {"prompt": PROMPT, "chosen": " a", "rejected": " b"},
        {"text": f"{PROMPT} valid"},
        {"text": f"{PROMPT} damages"},
    ]
    path = _write(tmp_path / "seed.jsonl", lines)
    bad = []
    (record,) = read_comparisons(path, tokenizer, "text_pairs", bad.append)
    assert [str(error) for error in bad] == [
        f'{path}:2: a pairs line, but format=text_pairs reads {{"text"}} lines in pairs, good before bad'
    ]
    assert record.response_texts == (" valid", " damages")
