"""Prompt-learning jsonl -> token samples: task templates with virtual-token markers, the answer field last.

    encoder = TemplateEncoder(tokenizer, model_section)            # PromptLearningModel: templates, tasks, lengths
    ids, answer, virtual, task = encoder.encode({"taskname": "squad", "context": ..., "question": ..., "answer": ...})
    prompt = encoder.prompt(line)                                    # (ids, virtual) a user's prompt gives

A line is laid out by its task's template: text segments with the line's {fields} filled in, and at each
<|VIRTUAL_PROMPT_n|> marker virtual_token_splits[n] placeholder tokens (the end-of-document id) that the method
replaces by the task's virtual token embeddings (`virtual` marks them). Each literal piece and each field value is
tokenized on its own, so truncation can drop tokens from the start of truncate_field's value exactly; the answer
gets the spaces that end the prompt, as in sft_data.py (GPT-2 BPE glues a space to the word after it).
"""

from functools import partial
from pathlib import Path
from typing import Any

import torch

from ...contract.schemas.gpt_prompt_learning import FIELD, VIRTUAL_MARKER
from ..common.config import JobConfigError
from .sft_data import MixedDataset, collate, jsonl_records

Line = dict[str, Any]


def read_prompt_jsonl(path: str, tasks: dict[str, Any]) -> list[Line]:
    """Every line of a prompt-learning file, checked for a known taskname and the fields its template needs."""
    lines = []
    for number, line in jsonl_records(path):
        template = tasks.get(line.get("taskname")) if isinstance(line, dict) else None
        if template is None:
            raise JobConfigError(
                f"{path}:{number}: taskname {line.get('taskname') if isinstance(line, dict) else None!r} "
                f"has no task template (model.task_templates: {', '.join(tasks)})"
            )
        missing = [f for f in template.fields() + [template.answer_field] if not isinstance(line.get(f), str)]
        if missing:
            raise JobConfigError(
                f"{path}:{number}: needs text under {missing[0]!r} (the {line['taskname']} template's field)"
            )
        lines.append(line)
    if not lines:
        raise JobConfigError(f"{path}: holds no line")
    return lines


class TemplateEncoder:
    def __init__(self, tokenizer, model, add_eos: bool = True):
        self.tokenizer = tokenizer
        self.templates = {t.taskname: t for t in model.task_templates}
        # Task numbers of the prompt table: existing tasks first, then the new ones, as the result file lists them.
        self.task_numbers = {name: i for i, name in enumerate(list(model.existing_tasks) + list(model.new_tasks))}
        self.max_ids = model.encoder_seq_length + 1  # the model sees encoder_seq_length tokens and predicts one more
        self.add_eos = add_eos

    def _pieces(self, line: Line) -> tuple[list[tuple[str, list[int]]], str]:
        """The prompt as (kind, ids) pieces, kind "virtual", "text" or a field name; and the answer's leading text."""
        template = self.templates[line["taskname"]]
        text = template.prompt_template.rstrip()
        prefix = text[: -len("{" + template.answer_field + "}")]
        prompt = prefix.rstrip(" ")
        pieces: list[tuple[str, list[int]]] = []
        splits = iter(template.virtual_token_splits)
        for index, part in enumerate(VIRTUAL_MARKER.split(prompt)):
            if index % 2:  # a marker's number: its virtual tokens
                pieces.append(("virtual", [self.tokenizer.eod] * next(splits)))
                continue
            for position, chunk in enumerate(FIELD.split(part)):
                value = line[chunk] if position % 2 else chunk
                if value:
                    pieces.append((chunk if position % 2 else "text", self.tokenizer.encode(value)))
        return pieces, prefix[len(prompt) :]

    def prompt(self, line: Line, room: int = 0) -> tuple[list[int], list[bool]]:
        """(ids, virtual) of the prompt, cut to leave `room` tokens within the length limit (truncate_field first)."""
        pieces, _ = self._pieces(line)
        return self._flatten(pieces, line, room)

    def _flatten(self, pieces, line: Line, room: int) -> tuple[list[int], list[bool]]:
        template = self.templates[line["taskname"]]
        excess = sum(len(ids) for _, ids in pieces) + room - self.max_ids
        if excess > 0:
            cut = template.truncate_field or "text"
            for index, (kind, ids) in enumerate(pieces):
                if kind == cut and excess > 0:
                    dropped = min(excess, len(ids) - 1)
                    pieces[index] = (kind, ids[dropped:])
                    excess -= dropped
        ids, virtual = [], []
        for kind, piece in pieces:
            ids += piece
            virtual += [kind == "virtual"] * len(piece)
        return ids, virtual

    def encode(self, line: Line) -> tuple[list[int], list[bool], list[bool], int]:
        pieces, lead = self._pieces(line)
        template = self.templates[line["taskname"]]
        answer = self.tokenizer.encode(lead + line[template.answer_field])
        if self.add_eos:
            answer = answer + [self.tokenizer.eod]
        ids, virtual = self._flatten(pieces, line, len(answer))
        answer = answer[: max(0, self.max_ids - len(ids))]
        if not answer:
            raise JobConfigError(
                f"a {line['taskname']} line keeps no answer token within model.encoder_seq_length "
                f"{self.max_ids - 1}; raise it, or set the template's truncate_field"
            )
        mask = [False] * len(ids) + [True] * len(answer)
        if not template.answer_only_loss:
            mask = [not v for v in virtual] + [True] * len(answer)
        return ids + answer, mask, virtual + [False] * len(answer), self.task_numbers.get(line["taskname"], -1)


class EncodedLines(torch.utils.data.Dataset):
    def __init__(self, lines, encoder: TemplateEncoder):
        self.lines, self.encoder = lines, encoder

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, n: int):
        return self.encoder.encode(self.lines[n])


class PromptLearningData:
    """The data interface of answer_data.py for the prompt_learning, adapter_learning and ia3_learning stages."""

    length_key = "model.encoder_seq_length"

    def __init__(self, model):
        self.model = model
        self.num_workers = model.data.num_workers
        self.max_seq_length = model.encoder_seq_length
        self.tasks = {t.taskname: t for t in model.task_templates}

    def collate(self, tokenizer):
        # Every template's answer_only_loss is already in the sample's loss mask.
        return partial(collate, pad_id=tokenizer.eod, answer_only_loss=True)

    def encoder(self, tokenizer) -> TemplateEncoder:
        return TemplateEncoder(tokenizer, self.model, self.model.data.add_eos)

    def _trained_lines(self, path: str) -> list[Line]:
        lines = read_prompt_jsonl(path, self.tasks)
        kept = [line for line in lines if line["taskname"] in self.model.new_tasks]
        if not kept:
            raise JobConfigError(f"{path}: holds no line of the new tasks {self.model.new_tasks}")
        return kept

    def train_dataset(self, tokenizer, size: int, seed: int):
        sources = [self._trained_lines(path) for path in self.model.data.train_ds]
        total = sum(len(s) for s in sources)
        mixed = MixedDataset(sources, [len(s) / total for s in sources], size, seed, shuffle=self.model.data.shuffle)
        return EncodedLines(mixed, self.encoder(tokenizer))

    def validation_sets(self, tokenizer):
        encoder = self.encoder(tokenizer)
        return [
            (Path(path).stem, EncodedLines(self._trained_lines(path), encoder))
            for path in self.model.data.validation_ds
        ]

    def describe(self) -> str:
        return f"{', '.join(self.model.data.train_ds)} (tasks {', '.join(self.model.new_tasks)})"

    def validation_metrics(self, job, module) -> dict[str, float]:
        return {}
