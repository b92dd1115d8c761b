"""What a data step did, item by item, turned into the summary its log ends with.

    report = StepReport("preprocess", unit="shard")
    report.done("00", output="/data/preprocessed/x_00_text_document", size_bytes=82_000, documents=67, tokens=18_347)
    report.kept("01", output="/data/preprocessed/x_01_text_document", documents=67, tokens=19_204)
    return report                    # run_step prints report.summary(seconds) when the step returns

->  preprocess finished: 1 shard done, 1 already complete
      documents  134
      tokens     37.6k
      input      82 kB (0.27 MB/s)
      output     /data/preprocessed
      time       0:00:03
"""

import os

from ..common.report import Summary, count, duration, size


class StepReport:
    def __init__(self, step: str, unit: str = "shard", size_label: str = "input"):
        self.step = step
        self.unit = unit  # what one item is: a shard, a file, a tokenizer
        self.size_label = size_label  # what the counted bytes are: the input read, the bytes fetched
        self.finished: list[str] = []
        self.complete_before: list[str] = []
        self.outputs: list[str] = []
        self.size_bytes = 0  # input bytes this run processed
        self.documents = 0
        self.tokens = 0
        self.items = 0  # indexed items; more than documents when documents were split into sentences
        self.notes: list[tuple] = []  # extra (key, value) lines

    def done(
        self, item, output: str | None = None, size_bytes: int = 0, documents: int = 0, tokens: int = 0, items: int = 0
    ) -> None:
        """An item this run worked on."""
        self.finished.append(str(item))
        self.size_bytes += size_bytes
        self._count(output, documents, tokens, items)

    def kept(self, item, output: str | None = None, documents: int = 0, tokens: int = 0, items: int = 0) -> None:
        """An item an earlier run had finished."""
        self.complete_before.append(str(item))
        self._count(output, documents, tokens, items)

    def note(self, key: str, value) -> None:
        self.notes.append((key, value))

    def _count(self, output: str | None, documents: int, tokens: int, items: int = 0) -> None:
        self.documents += documents
        self.tokens += tokens
        self.items += items
        if output:
            self.outputs.append(output)

    def summary(self, seconds: float) -> Summary:
        title = f"{self.step} finished: {_items(len(self.finished), self.unit)} done"
        if self.complete_before:
            title += f", {len(self.complete_before)} already complete"
        summary = Summary(title)
        if self.documents or self.tokens:
            summary.add("documents", count(self.documents))
            if self.items > self.documents:
                summary.add("sentences", count(self.items))
            summary.add("tokens", count(self.tokens))
        if self.size_bytes:
            rate = f" ({size(self.size_bytes / seconds)}/s)" if seconds > 0 else ""
            summary.add(self.size_label, f"{size(self.size_bytes)}{rate}")
        for key, value in self.notes:
            summary.add(key, value)
        folders = sorted({os.path.dirname(os.path.abspath(path)) for path in self.outputs})
        if folders:
            summary.add("output", ", ".join(folders))
        return summary.add("time", duration(seconds))


def _items(number: int, unit: str) -> str:
    return f"{number} {unit}{'' if number == 1 else 's'}"
