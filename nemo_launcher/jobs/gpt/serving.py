"""GPT's generator behind the exported Triton model (serving/text.py answers requests with it): greedy decoding
that stops at the end-of-document token.

    generator = TextGenerator.load("<model dir>/1/model.nemo", data_type="fp16", tokens_to_generate=32)
    generator.answer({"prompt": np.array([[b"Hello"]], dtype=object)})

A model repository whose config.pbtxt names no generator is served by this class (serving/text.py's
DEFAULT_GENERATOR), so keep its module path and name.
"""

from ..common.config import JobConfigError
from ..serving import text


class TextGenerator(text.TextGenerator):
    @classmethod
    def load(cls, nemo_path: str, data_type: str, tokens_to_generate: int) -> "TextGenerator":
        # Deferred: megatron-core and the model load only when a server starts.
        from .inference import load_gpt_from_nemo

        if data_type not in text.DATA_TYPES:
            raise JobConfigError(f"data_type: {data_type!r} is not one of {', '.join(text.DATA_TYPES)}")
        model, tokenizer = load_gpt_from_nemo(nemo_path, precision=data_type)
        max_length = model.max_sequence_length
        if data_type != "fp32":
            from megatron.core.transformer.module import Float16Module  # deferred with megatron-core

            # Casts every parameter (norms included) and the inputs/logits at the model's edges, as in training.
            model = Float16Module(model.config, model)
        return cls(model, tokenizer, max_length, tokens_to_generate)

    def generate(self, prompt: str, max_tokens: int | None = None) -> list[int]:
        from .generate import greedy_generate  # deferred with megatron-core

        limit = self.tokens_to_generate if max_tokens is None else max_tokens
        return greedy_generate(
            self.model,
            self.tokenizer.encode(prompt),
            limit,
            self.tokenizer.eod,
            self.tokenizer.vocab_size,
            self.max_length,
        )
