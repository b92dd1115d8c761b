"""Prompt/answer jsonl -> token samples for supervised fine-tuning, with the loss on the answer only.

    examples = read_jsonl("train.jsonl", context_key="input", label_key="output")
    encoder = SampleEncoder(tokenizer, section)                  # section: a DatasetSection
    ids, answer = encoder.encode(examples[0])                  # answer[i]: ids[i] belongs to the answer
    dataset = MixedDataset([examples_a, examples_b], [0.7, 0.3], size=steps * global_batch, seed=1234)
    batch = collate([encoder.encode(e) for e in dataset[...]], pad_id=tokenizer.eod, answer_only_loss=True)

A sample is `prompt + answer (+ end-of-document)`, where the prompt is prompt_template up to `{output}`
with `{input}` filled in. Prompt and answer are tokenized separately, so the boundary is exact and the
prompt's tokens are the same ones a user's prompt gives at generation time. Spaces at the end of the
prompt move to the start of the answer: GPT-2-style BPE glues a space to the word after it, so
"Answer: Denver" is `Answer`, `:`, ` Denver` and a prompt ending in a bare space would end in a token
that never occurs in running text.

A batch holds tokens and labels shifted by one: position j predicts ids[j + 1], and counts in the loss
when ids[j + 1] is an answer token (or any real token with answer_only_loss false). Padding (the
end-of-document id) goes at the end and never counts. Attention stays plainly causal: right padding
cannot influence earlier positions.
"""

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...contract.schemas.gpt_sft import DatasetSection
from ..common.config import JobConfigError

Example = dict[str, str]


def jsonl_records(path: str) -> Iterator[tuple[int, Any]]:
    """(line number from 1, parsed JSON) of every non-blank line of a jsonl file; JobConfigError when the file does
    not exist or a line is not JSON."""
    if not Path(path).is_file():
        raise JobConfigError(f"{path}: no such jsonl file")
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise JobConfigError(f"{path}:{number}: not a JSON object ({error.msg})") from None
            yield number, record


def read_jsonl(path: str, context_key: str = "input", label_key: str = "output") -> list[Example]:
    """Every line as {"input": ..., "output": ...} (plus "answers" when the line has them)."""
    examples = []
    for number, record in jsonl_records(path):
        if (
            not isinstance(record, dict)
            or not isinstance(record.get(context_key), str)
            or not isinstance(record.get(label_key), str)
        ):
            raise JobConfigError(
                f"{path}:{number}: needs text under {context_key!r} and {label_key!r} "
                "(set context_key / label_key to the keys your file uses)"
            )
        example = {"input": record[context_key], "output": record[label_key]}
        if isinstance(record.get("answers"), list):
            example["answers"] = [str(a) for a in record["answers"]]
        examples.append(example)
    if not examples:
        raise JobConfigError(f"{path}: holds no sample")
    return examples


def split_template(template: str) -> tuple[str, str]:
    """(prompt part with {input}, text between the prompt and the answer): "Q: {input}\\nA: {output}" ->
    ("Q: {input}\\nA:", " "). Trailing spaces of the prompt become the answer's leading text."""
    prefix = template.rstrip()[: -len("{output}")]
    prompt = prefix.rstrip(" ")
    return prompt, prefix[len(prompt) :]


class SampleEncoder:
    """Tokenizes examples under one dataset section's template, length limit and truncation rule."""

    def __init__(self, tokenizer, section: DatasetSection):
        self.tokenizer = tokenizer
        self.prompt_part, self.answer_lead = split_template(section.prompt_template)
        # The model sees max_seq_length tokens and predicts the next one at each: ids hold one more.
        self.max_ids = section.max_seq_length + 1
        self.truncation_field = section.truncation_field
        self.add_eos = section.add_eos

    def prompt_ids(self, text: str) -> list[int]:
        """What a user sends at generation time, tokenized as in training."""
        return self.tokenizer.encode(self.prompt_part.replace("{input}", text))

    def encode(self, example: Example) -> tuple[list[int], list[bool]]:
        prompt = self.prompt_ids(example["input"])
        answer = self.tokenizer.encode(self.answer_lead + example["output"])
        if self.add_eos:
            answer = answer + [self.tokenizer.eod]
        excess = len(prompt) + len(answer) - self.max_ids
        if excess > 0:
            if self.truncation_field == "context":
                # The question sits at the end of the prompt: drop from the start, keep at least one token.
                cut = min(excess, len(prompt) - 1)
                prompt, excess = prompt[cut:], excess - cut
            if excess > 0:
                answer = answer[: len(answer) - excess]
        if not answer:
            raise JobConfigError(
                f"a sample keeps no answer token within max_seq_length {self.max_ids - 1}: "
                f"{example['input'][:60]!r}...; raise max_seq_length"
            )
        return prompt + answer, [False] * len(prompt) + [True] * len(answer)


class MixedDataset(torch.utils.data.Dataset):
    """`size` examples drawn from several example lists with fixed probabilities, in an order that is a
    pure function of the seed: sample n is the same on every rank and in every rerun.

    Which list serves sample n follows Megatron's blending rule (at every position, the list furthest
    behind its share), so any window of the order holds the lists in proportion. Within a list, each
    pass is a fresh permutation seeded by (seed, list, pass).
    """

    def __init__(
        self,
        sources: Sequence[list[Example]],
        probabilities: Sequence[float] | None,
        size: int,
        seed: int,
        shuffle: bool = True,
    ):
        self.sources = [list(s) for s in sources]
        weights = np.asarray(probabilities if probabilities is not None else [1.0] * len(sources), dtype=np.float64)
        weights = weights / weights.sum()
        self.seed, self.shuffle = seed, shuffle
        self.which = np.zeros(size, dtype=np.int64)
        self.draw = np.arange(size, dtype=np.int64)
        if len(sources) > 1:
            taken = np.zeros(len(sources), dtype=np.int64)
            for n in range(size):
                source = int(np.argmax(weights * (n + 1) - taken))
                self.which[n], self.draw[n] = source, taken[source]
                taken[source] += 1
        self._orders: dict[int, tuple[int, np.ndarray]] = {}  # source -> (pass, permutation)

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, n: int) -> Example:
        source = int(self.which[n])
        length = len(self.sources[source])
        epoch, offset = divmod(int(self.draw[n]), length)
        if not self.shuffle:
            return self.sources[source][offset]
        cached = self._orders.get(source)
        if cached is None or cached[0] != epoch:
            # Loaders read in order, so one pass per source is all that is ever needed at once.
            cached = self._orders[source] = (
                epoch,
                np.random.default_rng([self.seed, source, epoch]).permutation(length),
            )
        return self.sources[source][int(cached[1][offset])]


class EncodedDataset(torch.utils.data.Dataset):
    """Tokenizes lazily, so DataLoader workers share the work and start-up does not wait for a whole file."""

    def __init__(self, examples: torch.utils.data.Dataset, encoder: SampleEncoder):
        self.examples, self.encoder = examples, encoder

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, n: int) -> tuple[list[int], list[bool]]:
        return self.encoder.encode(self.examples[n])


def collate(
    samples: Sequence[tuple], pad_id: int, answer_only_loss: bool, pad_to_multiple_of: int = 8
) -> dict[str, torch.Tensor]:
    """One padded batch: tokens, labels, loss_mask, position_ids, all [batch, length].

    Every sample of a step is padded to the same length (the step's microbatches are cut from one
    tensor); rounding the length up to a multiple of 8 keeps GPU matrix shapes tile-friendly. Samples of
    prompt learning (prompt_data.py) carry two more entries, which become `virtual_mask` [batch, length]
    (the positions of virtual tokens) and `task_ids` [batch].
    """
    longest = max(len(sample[0]) for sample in samples) - 1
    length = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    tokens = torch.full((len(samples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(samples), length), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(samples), length), dtype=torch.float32)
    for row, (ids, answer, *_) in enumerate(samples):
        count = len(ids) - 1
        tokens[row, :count] = torch.tensor(ids[:-1])
        labels[row, :count] = torch.tensor(ids[1:])
        counted = answer[1:] if answer_only_loss else [True] * count
        loss_mask[row, :count] = torch.tensor(counted, dtype=torch.float32)
    positions = torch.arange(length).unsqueeze(0).expand(len(samples), length).contiguous()
    batch = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": positions}
    if len(samples[0]) == 4:
        virtual = torch.zeros((len(samples), length), dtype=torch.bool)
        for row, (ids, _, marks, _) in enumerate(samples):
            virtual[row, : len(ids) - 1] = torch.tensor(marks[:-1], dtype=torch.bool)
        batch["virtual_mask"] = virtual
        batch["task_ids"] = torch.tensor([sample[3] for sample in samples], dtype=torch.long)
    return batch
