"""Prompt-learning jsonl -> T5 samples: the task template's prompt (virtual tokens and fields) is the encoder's
input, the answer field is the decoder's target.

    data = T5PromptData(cfg.model)                  # the interface of tuning/answer_data.py, for T5's tuning job
    source, virtual, answer, task = data.encoder(tokenizer).encode(line)

The prompt is laid out and truncated as GPT's (gpt/prompt_data.TemplateEncoder: each <|VIRTUAL_PROMPT_n|> marker
becomes placeholder tokens the method replaces, truncate_field loses tokens first), then ends with eos as a
fine-tuning source does (text_pairs.py). model.encoder_seq_length bounds the encoder's input, virtual tokens and
eos included, and the answer. The decoder reads bos + answer and learns answer + eos (the loss is on the answer
alone, whatever answer_only_loss says: a T5 never predicts its input). A batch is padded to its longest source and
its longest answer.
"""

from collections.abc import Sequence
from functools import partial

import torch

from ..common.config import JobConfigError
from ..tuning.prompt_data import PromptLearningData, TemplateEncoder

Sample = tuple[list[int], list[bool], list[int], int]  # source ids, virtual flags, answer ids, task number


class T5TemplateEncoder(TemplateEncoder):
    def prompt(self, line, room: int = 0) -> tuple[list[int], list[bool]]:
        """(encoder ids ending with eos, virtual flags) of a line's prompt: what training and evaluation feed."""
        # TemplateEncoder leaves `room` below encoder_seq_length + 1: 2 more keep the prompt and its eos within it.
        ids, virtual = super().prompt(line, room + 2)
        return ids + [self.tokenizer.eos], virtual + [False]

    def encode(self, line) -> Sample:
        ids, virtual = self.prompt(line)
        template = self.templates[line["taskname"]]
        answer = self.tokenizer.encode(line[template.answer_field])[: self.max_ids - 2]
        if not answer:
            raise JobConfigError(f"a {line['taskname']} line has an empty {template.answer_field!r} once tokenized")
        return ids, virtual, answer, self.task_numbers.get(line["taskname"], -1)


def _padded(length: int, multiple: int = 8) -> int:
    return -(-length // multiple) * multiple


def collate(samples: Sequence[Sample], tokenizer, add_eos: bool) -> dict[str, torch.Tensor]:
    """One batch in the T5 recipe's layout (text_enc, enc_mask, text_dec, dec_mask, labels, loss_mask), plus the
    prompt methods' virtual_mask [batch, encoder tokens] and task_ids [batch]."""
    rows = len(samples)
    targets = [(answer + [tokenizer.eos]) if add_eos else answer for _, _, answer, _ in samples]
    source_length = _padded(max(len(ids) for ids, *_ in samples))
    target_length = _padded(max(len(t) for t in targets))
    batch = {
        "text_enc": torch.full((rows, source_length), tokenizer.pad, dtype=torch.long),
        "enc_mask": torch.zeros((rows, source_length), dtype=torch.long),
        "virtual_mask": torch.zeros((rows, source_length), dtype=torch.bool),
        "text_dec": torch.full((rows, target_length), tokenizer.pad, dtype=torch.long),
        "dec_mask": torch.zeros((rows, target_length), dtype=torch.long),
        "labels": torch.full((rows, target_length), tokenizer.pad, dtype=torch.long),
        "loss_mask": torch.zeros((rows, target_length), dtype=torch.float32),
        "task_ids": torch.tensor([task for *_, task in samples], dtype=torch.long),
    }
    for row, ((ids, virtual, _, _), target) in enumerate(zip(samples, targets)):
        decoder = [tokenizer.bos] + target[:-1]
        batch["text_enc"][row, : len(ids)] = torch.tensor(ids)
        batch["enc_mask"][row, : len(ids)] = 1
        batch["virtual_mask"][row, : len(ids)] = torch.tensor(virtual)
        batch["text_dec"][row, : len(decoder)] = torch.tensor(decoder)
        batch["dec_mask"][row, : len(decoder)] = 1
        batch["labels"][row, : len(target)] = torch.tensor(target)
        batch["loss_mask"][row, : len(target)] = 1.0
    return batch


class T5PromptData(PromptLearningData):
    """GPT's prompt-learning data (the files, the training mix, the validation files) with T5's samples."""

    def collate(self, tokenizer):
        return partial(collate, tokenizer=tokenizer, add_eos=self.model.data.add_eos)

    def encoder(self, tokenizer) -> T5TemplateEncoder:
        return T5TemplateEncoder(tokenizer, self.model, add_eos=False)
