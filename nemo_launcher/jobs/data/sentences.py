"""Rule-based sentence splitting for BERT and T5 data: no trained model, no nltk data, no network.

    split_sentences('Dr. Smith paid $3.50 for it. "Why?" she asked. Then she left.')
    -> ['Dr. Smith paid $3.50 for it.', '"Why?" she asked.', 'Then she left.']

megatron-core's BERT and T5 datasets build samples from whole sentences (one indexed-dataset item per
sentence, a document being a run of sentences), so preprocessing has to cut documents into sentences. Megatron-LM
does it with nltk's punkt model, which compute nodes without network cannot fetch. These rules cover what matters
for sample building; a missed boundary only makes one item longer, a wrong one splits a sentence in two.

A sentence ends:
1. at a paragraph break (a newline, optional spaces or tabs, another newline), always;
2. after a run of `. ! ? … ‽` (or the danda, Arabic, Armenian, Ethiopic or Burmese full stops), with any closing
   quotes or brackets that follow it, when whitespace follows and the next word (after any opening quote or
   bracket) does not start with a lower-case letter: "e.g. the", "approx. five", "wait... and" stay whole;
3. after the CJK full stops `。！？｡` (and closing brackets after them), with or without whitespace.

A single `.` does not end a sentence after
- a title or reference abbreviation (Dr., Mr., St., Fig., No., pp., vs., e.g., i.e., Jan., ...: _NEVER_FINAL),
- a single letter (initials: "J. R. R. Tolkien") or a dotted acronym ("U.S. Army", "a.m."),
- a number that is the first word of its line (an enumerated list item: "1. Install it"),
and after abbreviations that often do end a sentence (etc., Inc., Ltd., Jr., al.: _MAYBE_FINAL) only when the
next word starts with a capital letter. Decimals ("3.14"), versions and URLs have no whitespace after the dot and
are never cut. A single newline that is not after a sentence end is a wrapped line, not a boundary.

Sentences are the text between boundaries with surrounding whitespace stripped; empty ones are dropped. The
text inside a sentence is unchanged, so encoding the sentences one by one with a tokenizer that splits at
whitespace gives the tokens of the document in order.
"""

import re

_CLOSING = "\"'”’»)\\]}"
_OPENING = "\"'“‘«([{¿¡"
_BOUNDARY = re.compile(
    # The lookahead is not needed for the meaning: it lets the regex engine skip to the next stop or newline,
    # which makes the scan about four times faster.
    "(?=[。！？｡.!?…‽।॥؟۔։።။\n])"
    "(?:(?P<cjk>[。！？｡]+[」』）】〕〉》\"'”’]*)"  # CJK full stops end a sentence without whitespace after them
    f"|(?P<stop>[.!?…‽]+|[।॥؟۔։።။]+)(?P<close>[{re.escape(_CLOSING)}]*)(?P<space>\\s+)"
    "|(?P<para>\\n[ \\t\\r\\f\\v]*\\n\\s*))"  # a paragraph break
)
# Abbreviations that come before a name, a number or a reference and so never end a sentence (lower case,
# without the final dot).
_NEVER_FINAL = frozenset(
    """
    mr mrs ms dr prof rev hon gen col capt cpt lt sgt cmdr adm gov sen rep pres supt insp st mt ft messrs mme mlle
    no nos vol vols fig figs eq eqs ch chap sec sect art p pp para paras ref refs tab ex approx ca cf vs viz e.g i.e
    op cit ed eds trans dept univ assn est jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)
# Abbreviations that may end a sentence: a boundary only before a capitalised word.
_MAYBE_FINAL = frozenset("etc inc ltd co corp jr sr esq al bros llc plc".split())
_LAST_WORD = re.compile(r"\S*$")
_ACRONYM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # U.S, e.g, a.m (the final dot is the terminator)


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, in order, stripped; [] for text with nothing but whitespace."""
    sentences = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.group("para") is not None:
            cut, resume = match.start(), match.end()
        elif match.group("cjk") is not None:
            cut = resume = match.end()
        elif _ends_sentence(text, match):
            cut, resume = match.start("space"), match.end()
        else:
            continue
        sentence = text[start:cut].strip()
        if sentence:
            sentences.append(sentence)
        start = resume
    rest = text[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def _ends_sentence(text: str, match: "re.Match") -> bool:
    following = _next_word_start(text, match.end())
    if following and following.islower():
        return False
    stop = match.group("stop")
    if stop != ".":
        return True  # ! ? … .. and the other scripts' full stops: the lower-case test above is the only rule
    word = _word_before(text, match.start())
    lowered = word.lower()
    if lowered in _NEVER_FINAL:
        return False
    if lowered in _MAYBE_FINAL:
        return following.isupper()
    if len(word) == 1 and word.isalpha():
        return False  # an initial
    if _ACRONYM.fullmatch(word):
        return False
    if word.isdigit() and _first_on_line(text, match.start() - len(word)):
        return False  # "1. Install it": an enumerated item, not a sentence that ends in a number
    return True


def _next_word_start(text: str, position: int) -> str:
    """The first character after `position` that is not an opening quote or bracket ('' at the end)."""
    end = len(text)
    while position < end and text[position] in _OPENING:
        position += 1
    return text[position] if position < end else ""


def _word_before(text: str, end: int) -> str:
    """The non-whitespace run that ends at `end` (its last 40 characters: longer words are no abbreviations),
    without opening quotes or brackets."""
    return _LAST_WORD.search(text, max(0, end - 40), end).group().lstrip(_OPENING)


def _first_on_line(text: str, position: int) -> bool:
    line_start = text.rfind("\n", 0, position) + 1
    return not text[line_start:position].strip()
