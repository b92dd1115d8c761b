"""Regenerate corpora/tiny_pile/{00,01,02}.jsonl.zst: a three-shard Pile stand-in for the quick start and tests.

    python3 corpora/make_tiny_pile.py [/usr/share/common-licenses]

The text is the license texts Debian ships in /usr/share/common-licenses (GPL, Apache, BSD, MPL, ...), whose
terms allow verbatim copies. Each license becomes documents of up to four paragraphs, dealt to the shards in
turn, in the Pile's jsonl format ({"text": ..., "meta": {...}}). The output is deterministic (sorted input,
fixed compression level), so rerunning it on the same input reproduces the committed files byte for byte.
"""

import json
import pathlib
import sys

import zstandard

SHARDS = 3
PARAGRAPHS_PER_DOCUMENT = 4


def documents(source: pathlib.Path):
    for path in sorted(p for p in source.iterdir() if p.is_file() and not p.is_symlink()):
        paragraphs = [p.strip("\n") for p in path.read_text(encoding="utf-8", errors="replace").split("\n\n")]
        paragraphs = [p for p in paragraphs if p.strip()]
        for first in range(0, len(paragraphs), PARAGRAPHS_PER_DOCUMENT):
            text = "\n\n".join(paragraphs[first : first + PARAGRAPHS_PER_DOCUMENT])
            yield {"text": text, "meta": {"pile_set_name": "common-licenses", "source": path.name}}


def main() -> None:
    source = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/common-licenses")
    target = pathlib.Path(__file__).resolve().parent / "tiny_pile"
    target.mkdir(exist_ok=True)
    shards = [[] for _ in range(SHARDS)]
    for index, document in enumerate(documents(source)):
        shards[index % SHARDS].append(json.dumps(document) + "\n")
    compressor = zstandard.ZstdCompressor(level=19)
    for number, lines in enumerate(shards):
        data = "".join(lines).encode("utf-8")
        (target / f"{number:02d}.jsonl.zst").write_bytes(compressor.compress(data))
        print(f"{number:02d}.jsonl.zst: {len(lines)} documents, {len(data)} bytes of jsonl")


if __name__ == "__main__":
    main()
