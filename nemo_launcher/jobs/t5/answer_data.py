"""Prompt/answer jsonl (the peft stage's data, as GPT reads it) -> T5 samples: the prompt_template's part before
{output} is the encoder's input, the answer the decoder's target.

    data = T5AnswerData(cfg.model.data)          # tuning/answer_data.PromptAnswerData's interface, for T5Tuning
    source, virtual, answer, task = T5SampleEncoder(tokenizer, section).encode(example)

Samples take prompt_data.py's layout (no virtual tokens, no task), so its collate batches them. Encoder and decoder
have their own sequences, each up to max_seq_length: a long prompt loses its start (the question sits at its end),
a long answer its end, whatever truncation_field says (it decides between the two only where they share one
sequence, in a GPT). The loss is on the answer alone: a T5 never predicts its input.
"""

from functools import partial

from ..common.config import JobConfigError
from ..tuning.answer_data import PromptAnswerData
from ..tuning.sft_data import SampleEncoder


class T5SampleEncoder(SampleEncoder):
    def prompt_ids(self, text: str) -> list[int]:
        """The encoder's input (ending with eos, as every T5 source does) at training and generation time."""
        limit = self.max_ids - 1
        ids = self.tokenizer.encode(self.prompt_part.replace("{input}", text).strip())
        return ids[max(0, len(ids) + 1 - limit) :] + [self.tokenizer.eos]

    def encode(self, example) -> tuple[list[int], list[bool], list[int], int]:
        source = self.prompt_ids(example["input"])
        # Room for the decoder's bos (inputs) or eos (labels) beside the answer.
        answer = self.tokenizer.encode((self.answer_lead + example["output"]).strip())[: self.max_ids - 2]
        if not answer:
            raise JobConfigError(f"a sample has an empty answer once tokenized: {example['input'][:60]!r}...")
        return source, [False] * len(source), answer, -1


class T5AnswerData(PromptAnswerData):
    sample_encoder = T5SampleEncoder

    def __init__(self, data):
        super().__init__(data, answer_only_loss=True)

    def collate(self, tokenizer):
        from .prompt_data import collate

        return partial(collate, tokenizer=tokenizer, add_eos=self.train.add_eos)

    @staticmethod
    def answer(job, prompt: list[int], tokens: int) -> list[int]:
        """Greedy answer ids to one encoder input (exact_match_share's `answer`)."""
        from .generate import greedy_answers

        return greedy_answers(job.model, [prompt], job.tokenizer, tokens)[0]
