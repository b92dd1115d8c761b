"""The data side of a prompt/answer tuning run (GPT's, T5's): the training mix, the validation files, the collate
and the exact-match score.

    data = PromptAnswerData(cfg.model.data, answer_only_loss=True)            # fine-tuning and LoRA (sft_data.py)
    train = data.train_dataset(tokenizer, size=steps * global_batch, seed=1234)
    sets = data.validation_sets(tokenizer)                                     # [(name, dataset), ...]

Prompt learning, adapters and IA3 read the prompt-learning jsonl format instead (prompt_data.py), with the same
interface.
"""

from functools import partial
from pathlib import Path

import torch

from .sft_data import EncodedDataset, MixedDataset, SampleEncoder, collate, read_jsonl


class PromptAnswerData:
    """{"input": ..., "output": ...} jsonl files under a prompt_template (the fine_tuning and peft stages)."""

    length_key = "model.data.train_ds.max_seq_length"
    sample_encoder = SampleEncoder  # a family's samples (T5's: t5/answer_data.py)

    def __init__(self, data, answer_only_loss: bool):
        self.train, self.validation = data.train_ds, data.validation_ds
        self.answer_only_loss = answer_only_loss
        self.num_workers = self.train.num_workers
        self.max_seq_length = max(self.train.max_seq_length, self.validation.max_seq_length)

    def collate(self, tokenizer):
        return partial(collate, pad_id=tokenizer.eod, answer_only_loss=self.answer_only_loss)

    def train_dataset(self, tokenizer, size: int, seed: int):
        section = self.train
        sources = [read_jsonl(name, section.context_key, section.label_key) for name in section.file_names]
        mixed = MixedDataset(sources, section.concat_sampling_probabilities, size, seed)
        return EncodedDataset(mixed, self.sample_encoder(tokenizer, section))

    def validation_sets(self, tokenizer) -> list[tuple[str, torch.utils.data.Dataset]]:
        section = self.validation
        encoder = self.sample_encoder(tokenizer, section)
        sets = []
        for index, name in enumerate(section.file_names):
            label = section.names[index] if section.names else Path(name).stem
            sets.append((label, EncodedDataset(read_jsonl(name, section.context_key, section.label_key), encoder)))
        return sets

    def describe(self) -> str:
        return ", ".join(self.train.file_names)

    def validation_metrics(self, job, module) -> dict[str, float]:
        """With metric exact_string_match: per validation file, the share of greedy answers equal to a reference."""
        metric = self.validation.metric
        if metric.name != "exact_string_match":
            return {}
        encoder = self.sample_encoder(job.tokenizer, self.validation)
        scores = {}
        for label, dataset in module.tuning.validation_sets:
            examples = dataset.examples
            count = min(len(examples), max(1, job.cfg.trainer.limit_val_batches) * job.cfg.model.global_batch_size)
            prompts = [encoder.prompt_ids(examples[i]["input"]) for i in range(count)]
            references = [
                [a.strip() for a in examples[i].get("answers", [examples[i]["output"]])] for i in range(count)
            ]
            scores[f"exact_string_match_{label}"] = exact_match_share(
                job, module.parts, prompts, references, metric.tokens_to_generate, answer=self.answer
            )
        return scores

    answer = None  # (job, prompt ids, tokens) -> answer ids, for data that answers otherwise than job.answer()


def exact_match_share(
    job, parts, prompts: list[list[int]], references: list[list[str]], tokens: int, samples=None, answer=None
) -> float:
    """Share of greedy answers (stripped) equal to one of their references, the prompts split over data-parallel
    ranks; the job's answer() generates them unless `answer` (a data's own) is given. A collective: every rank
    calls it."""
    tokenizer = job.tokenizer
    hits = torch.zeros(2, device=parts.device)
    for index in range(parts.dp_rank, len(prompts), parts.dp_size):
        if answer is not None:
            ids = answer(job, prompts[index], tokens)
        else:
            ids = job.answer(prompts[index], tokens, None if samples is None else samples[index])
        hits += torch.tensor([float(tokenizer.decode(ids).strip() in references[index]), 1.0], device=parts.device)
    if parts.placement.world_size > 1:
        torch.distributed.all_reduce(hits)
    right, total = hits.tolist()
    return right / total if total else 0.0  # every TP rank of a data-parallel rank counted the same prompts
