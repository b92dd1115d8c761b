"""The rule-based sentence splitter: hard cases (abbreviations, decimals, quotes, newlines, other scripts), and
that splitting never loses, reorders or changes text."""

import random

import pytest

from nemo_launcher.jobs.data.sentences import split_sentences
from tests.jobs.data_support import TRICKY_TEXTS, tiny_pile_texts


@pytest.mark.parametrize(
    "text, sentences",
    [
        # abbreviations and initials
        (
            "Dr. Smith met Mr. Jones at St. Mary's. They talked.",
            ["Dr. Smith met Mr. Jones at St. Mary's.", "They talked."],
        ),
        ("See Fig. 3 and pp. 12-14. The rest is in No. 5.", ["See Fig. 3 and pp. 12-14.", "The rest is in No. 5."]),
        ("J. R. R. Tolkien wrote it. E. Smith read it.", ["J. R. R. Tolkien wrote it.", "E. Smith read it."]),
        (
            "The U.S. Army left at 5 p.m. on Jan. 3. Nobody saw it.",
            ["The U.S. Army left at 5 p.m. on Jan. 3.", "Nobody saw it."],
        ),
        (
            "Use a tool, e.g. a hammer, i.e. something heavy. Done.",
            ["Use a tool, e.g. a hammer, i.e. something heavy.", "Done."],
        ),
        (
            "Bolts, nuts, etc. are sold here. Tools etc. Other items follow.",
            ["Bolts, nuts, etc. are sold here.", "Tools etc.", "Other items follow."],
        ),
        (
            "Acme Inc. makes tools. Smith et al. showed it. Jones Jr. agreed.",
            ["Acme Inc. makes tools.", "Smith et al. showed it.", "Jones Jr. agreed."],
        ),
        # numbers
        (
            "Pi is 3.14159 and e is 2.718. Both are irrational.",
            ["Pi is 3.14159 and e is 2.718.", "Both are irrational."],
        ),
        (
            "It costs $1.50, or 1,000.25 yen. Version 2.0.1 is out.",
            ["It costs $1.50, or 1,000.25 yen.", "Version 2.0.1 is out."],
        ),
        ("It happened in 1999. 2000 was calmer.", ["It happened in 1999.", "2000 was calmer."]),
        ("Steps:\n1. Install it.\n2. Run it.", ["Steps:\n1. Install it.", "2. Run it."]),
        # quotes and brackets
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ('"Why?" she asked. "Because!" he said.', ['"Why?" she asked.', '"Because!" he said.']),
        ("It ended (see below.) Next part.", ["It ended (see below.)", "Next part."]),
        ("The end. \"Another\" begins. 'Quoted' too.", ["The end.", '"Another" begins.', "'Quoted' too."]),
        ("Is it? (no) It is not.", ["Is it? (no) It is not."]),
        # other stops, ellipses, lower case after a stop
        ("Wait... what happened? Nothing! Really.", ["Wait... what happened?", "Nothing!", "Really."]),
        ("Wait... And then? Silence…", ["Wait...", "And then?", "Silence…"]),
        (
            "visit example.com. it is lower case after the stop.",
            ["visit example.com. it is lower case after the stop."],
        ),
        # newlines
        (
            "These lines are\nwrapped in one sentence. Then\nanother one.",
            ["These lines are\nwrapped in one sentence.", "Then\nanother one."],
        ),
        (
            "A heading\n\nA paragraph without a stop\n \nAnother one",
            ["A heading", "A paragraph without a stop", "Another one"],
        ),
        ("Ends a line.\nNext line.\r\n\r\nNew paragraph.", ["Ends a line.", "Next line.", "New paragraph."]),
        # other scripts
        ("这是第一句。这是第二句！第三句？好", ["这是第一句。", "这是第二句！", "第三句？", "好"]),
        ("「引用。」次の文。", ["「引用。」", "次の文。"]),
        ("यह पहला वाक्य है। यह दूसरा है।", ["यह पहला वाक्य है।", "यह दूसरा है।"]),
        ("Это первое предложение. Это второе.", ["Это первое предложение.", "Это второе."]),
        ("Première phrase. école est en minuscule.", ["Première phrase. école est en minuscule."]),
        # nothing to split
        ("", []),
        ("   \n\t ", []),
        ("no stop at all", ["no stop at all"]),
        ("  padded.  ", ["padded."]),
    ],
)
def test_hard_cases(text, sentences):
    assert split_sentences(text) == sentences


def _non_space(text: str) -> str:
    return "".join(text.split())


def test_text_is_never_lost_reordered_or_changed():
    rng = random.Random(11)
    alphabet = [
        "a",
        "B",
        "Dr",
        "e.g",
        "3",
        ".",
        ".",
        "!",
        "?",
        "…",
        " ",
        " ",
        "\n",
        "\n\n",
        "\t",
        '"',
        "'",
        ")",
        "(",
        "。",
        "।",
        "日",
        "x",
        "U.S",
        "1.",
        "etc",
    ]
    texts = (
        tiny_pile_texts()
        + TRICKY_TEXTS
        + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    )
    for text in texts:
        sentences = split_sentences(text)
        assert all(sentence and sentence == sentence.strip() for sentence in sentences), text
        assert _non_space("".join(sentences)) == _non_space(text), text
        position = 0
        for sentence in sentences:  # each sentence is a verbatim slice of the text, in order
            found = text.find(sentence, position)
            assert found >= position, (text, sentence)
            position = found + len(sentence)


def test_real_text_gets_sentences_of_sentence_length():
    sentences = [sentence for text in tiny_pile_texts() for sentence in split_sentences(text)]
    words = sorted(len(sentence.split()) for sentence in sentences)
    assert len(sentences) > 1000  # 200 documents of licence text
    assert 10 <= words[len(words) // 2] <= 40 and words[-1] < 200  # the median sentence, the longest
