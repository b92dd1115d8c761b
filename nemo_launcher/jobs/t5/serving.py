"""Answers behind a T5/mT5 Triton model: the text families' request handling (serving/text.py: the same tensors,
prompt in, completion and output_ids out, and the same unbatched answers) with T5's greedy decoding. The prompt is
the source text, encoded as fine-tuning encodes sources (eos appended); the completion is the decoded answer.

    generator = T5Generator.load("<model dir>/1/model.nemo", data_type="bf16", tokens_to_generate=32)
    generator.answer({"prompt": np.array([[b"question: ... context: ..."]], dtype=object)})
"""

from ..serving.text import DATA_TYPES, TextGenerator


class T5Generator(TextGenerator):
    @classmethod
    def load(cls, nemo_path: str, data_type: str, tokens_to_generate: int) -> "T5Generator":
        from ..common.config import JobConfigError
        from .standalone import load_t5_from_nemo

        if data_type not in DATA_TYPES:
            raise JobConfigError(f"data_type: {data_type!r} is not one of {', '.join(DATA_TYPES)}")
        from .generate import inference_ready

        model, tokenizer = load_t5_from_nemo(nemo_path, precision=data_type)
        return cls(inference_ready(model), tokenizer, model.max_sequence_length, tokens_to_generate)

    def generate(self, prompt: str, max_tokens: int | None = None) -> list[int]:
        from .generate import greedy_answers

        limit = self.tokens_to_generate if max_tokens is None else max_tokens
        source = self.tokenizer.encode(prompt)[: self.max_length - 1] + [self.tokenizer.eos]
        return greedy_answers(self.model, [source], self.tokenizer, limit)[0] if limit else []
