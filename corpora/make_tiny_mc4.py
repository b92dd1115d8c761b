"""Regenerate corpora/tiny_mc4/: a small multilingual corpus in the layout of Hugging Face's allenai/c4 (mC4).

    python3 corpora/make_tiny_mc4.py [/usr/share/locale]

The text is the message catalogs (translations) of GNU grep, sed, tar, diffutils and findutils as Debian ships
them in /usr/share/locale/<lang>/LC_MESSAGES/*.mo: each translated message (the English originals for `en`) is
a paragraph, and consecutive messages of one program make a document. These translations are distributed under
the programs' licence, the GNU GPL version 3 or later (tiny_mc4/COPYING). Records have mC4's fields
{"text", "timestamp", "url"}; each language is two train files plus a validation file (which data preparation
must leave out), English also as the cleaned C4 (en/). Deterministic (sorted messages, gzip without time or
name), so a rerun on the same catalogs reproduces the committed files byte for byte.
"""

import gettext
import gzip
import io
import json
import pathlib
import shutil
import sys

PROGRAMS = ("grep", "sed", "tar", "diffutils", "findutils")
LANGUAGES = {"de": "de", "fr": "fr", "ja": "ja", "ru": "ru", "zh": "zh_CN"}  # mC4 code -> locale folder
MESSAGES_PER_DOCUMENT = 6
TIMESTAMP = "2020-01-01T00:00:00Z"


def messages(locale_dir: pathlib.Path, locale: str, program: str, original: bool):
    with open(locale_dir / locale / "LC_MESSAGES" / f"{program}.mo", "rb") as handle:
        catalog = gettext.GNUTranslations(handle)._catalog
    for key in sorted(catalog, key=str):
        if key == "" or isinstance(key, tuple) and key[1] != 0:
            continue  # the header, and plural forms after the first
        msgid = key[0] if isinstance(key, tuple) else key
        text = (msgid if original else catalog[key]).strip()
        if len(text) > 20:  # single words and bare format strings say little
            yield text


def documents(locale_dir: pathlib.Path, locale: str, original: bool):
    for program in PROGRAMS:
        texts = list(messages(locale_dir, locale, program, original))
        for first in range(0, len(texts), MESSAGES_PER_DOCUMENT):
            yield {
                "text": "\n".join(texts[first : first + MESSAGES_PER_DOCUMENT]),
                "timestamp": TIMESTAMP,
                "url": f"https://www.gnu.org/software/{program}/",
            }


def write(path: pathlib.Path, records) -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as out:
        for record in records:
            out.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    print(f"{path.relative_to(path.parents[1])}: {len(records)} documents, {len(buffer.getvalue())} bytes")


def split_files(records, stem: str, folder: pathlib.Path, train_name, validation_name) -> None:
    """Every 10th document to validation, the rest dealt over two train files."""
    validation = records[::10]
    train = [record for index, record in enumerate(records) if index % 10]
    for number in range(2):
        write(folder / train_name(number, 2), train[number::2])
    write(folder / validation_name(0, 1), validation)


def main() -> None:
    locale_dir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/locale")
    target = pathlib.Path(__file__).resolve().parent / "tiny_mc4"
    shutil.rmtree(target / "multilingual", ignore_errors=True)
    shutil.rmtree(target / "en", ignore_errors=True)
    for code, locale in LANGUAGES.items():
        split_files(
            list(documents(locale_dir, locale, original=False)),
            code,
            target / "multilingual",
            lambda n, m, c=code: f"c4-{c}.tfrecord-{n:05d}-of-{m:05d}.json.gz",
            lambda n, m, c=code: f"c4-{c}-validation.tfrecord-{n:05d}-of-{m:05d}.json.gz",
        )
    english = list(documents(locale_dir, "de", original=True))  # the msgids: the programs' own English
    split_files(
        english,
        "en",
        target / "en",
        lambda n, m: f"c4-train.{n:05d}-of-{m:05d}.json.gz",
        lambda n, m: f"c4-validation.{n:05d}-of-{m:05d}.json.gz",
    )
    # mC4's own, uncleaned English: here the same text, one file (use_cleaned_english=false selects it).
    write(target / "multilingual" / "c4-en.tfrecord-00000-of-00001.json.gz", english)
    shutil.copyfile("/usr/share/common-licenses/GPL-3", target / "COPYING")


if __name__ == "__main__":
    main()
