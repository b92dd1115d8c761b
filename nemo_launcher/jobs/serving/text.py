"""Text generation behind the Triton model a text family's export writes; shared by its Python backend (1/model.py)
and by deployment/serve_pytriton.py, so both servers answer a request with the same code. A family's generator
(gpt/serving.py's, t5/serving.py's) subclasses TextGenerator with its load() and generate().

    generator = generator_from_parameters({"data_type": "fp16", "tokens_to_generate": "32"}, "<model dir>/1/model.nemo")
    outputs = generator.answer({"prompt": np.array([[b"Hello"]], dtype=object)})
    -> {"completion": [[b" world ..."]], "output_ids": [[995, ...]]}

The model's tensors, one definition for config.pbtxt and PyTriton alike:
| tensor     | direction | type   | shape (after the batch dim) | meaning                                           |
|------------|-----------|--------|-----------------------------|---------------------------------------------------|
| prompt     | input     | STRING | [1]                         | UTF-8 text to continue                            |
| max_tokens | input     | INT32  | [1], optional               | new tokens at most (default: tokens_to_generate)  |
| completion | output    | STRING | [1]                         | the generated text (the prompt not repeated)      |
| output_ids | output    | INT32  | [-1]                        | the generated token ids, -1 after the end         |
Generation is greedy and stops at the end-of-document token or after max_tokens.
"""

import abc
import dataclasses
import importlib

import numpy as np

PAD_ID = -1  # fills output_ids rows after a shorter answer ends; never a real token id


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    triton_type: str  # as written in config.pbtxt
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False


INPUTS = (TensorSpec("prompt", "TYPE_STRING", (1,)), TensorSpec("max_tokens", "TYPE_INT32", (1,), optional=True))
OUTPUTS = (TensorSpec("completion", "TYPE_STRING", (1,)), TensorSpec("output_ids", "TYPE_INT32", (-1,)))
NUMPY_TYPES = {"TYPE_STRING": np.object_, "TYPE_INT32": np.int32}
DATA_TYPES = ("fp32", "fp16", "bf16")
MODEL_FILE = "model.nemo"  # the weights and tokenizer inside the version folder
# config.pbtxt parameter naming the generator class ("module:Class" with load() and answer() as TextGenerator's);
# absent: DEFAULT_GENERATOR. An encoder-decoder family names its own (nemo_launcher.jobs.t5.serving:T5Generator).
GENERATOR_PARAMETER = "generator"
# The generator of a model repository whose config.pbtxt names none: GPT's export writes no parameter (a name, not
# an import: this wing imports no family).
DEFAULT_GENERATOR = "nemo_launcher.jobs.gpt.serving:TextGenerator"


def generator_from_parameters(parameters: dict[str, str], weights: str):
    """The generator a model's config.pbtxt parameters describe, loaded from its weights: what the Python backend
    and deployment/serve_pytriton.py both serve."""
    module, _, name = parameters.get(GENERATOR_PARAMETER, DEFAULT_GENERATOR).partition(":")
    generator = getattr(importlib.import_module(module), name)
    return generator.load(weights, parameters.get("data_type", "fp32"), int(parameters.get("tokens_to_generate", "32")))


class TextGenerator(abc.ABC):
    """Answers requests one prompt at a time; a family supplies load() and generate()."""

    def __init__(self, model, tokenizer, max_length: int, tokens_to_generate: int):
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length  # longest context the model takes; longer prompts keep their end
        self.tokens_to_generate = tokens_to_generate

    @classmethod
    @abc.abstractmethod
    def load(cls, nemo_path: str, data_type: str, tokens_to_generate: int) -> "TextGenerator":
        """The family's model and tokenizer from its `.nemo`, in data_type (one of DATA_TYPES)."""

    @abc.abstractmethod
    def generate(self, prompt: str, max_tokens: int | None = None) -> list[int]:
        """The token ids generated for one prompt (at most max_tokens, by default tokens_to_generate)."""

    def answer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request: prompt [batch, 1] bytes, optional max_tokens [batch, 1] -> the two outputs."""
        prompts = [_text(value) for value in np.asarray(inputs["prompt"]).reshape(-1)]
        limits: list[int | None] = [None] * len(prompts)
        if inputs.get("max_tokens") is not None:
            limits = [int(value) for value in np.asarray(inputs["max_tokens"]).reshape(-1)]
            if len(limits) != len(prompts) or any(limit < 0 for limit in limits):
                raise ValueError("max_tokens: give one count >= 0 per prompt")
        # One prompt at a time: each is decoded exactly as it would be alone (no padding in the batch).
        generated = [self.generate(prompt, limit) for prompt, limit in zip(prompts, limits)]
        width = max([len(ids) for ids in generated] + [1])
        output_ids = np.full((len(generated), width), PAD_ID, dtype=np.int32)
        for row, ids in enumerate(generated):
            output_ids[row, : len(ids)] = ids
        completion = np.array([[self.tokenizer.decode(ids).encode("utf-8")] for ids in generated], dtype=np.object_)
        return {"completion": completion, "output_ids": output_ids}


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)


def strip_padding(output_ids: np.ndarray) -> list[int]:
    """The token ids of one output_ids row, without the -1 padding."""
    return [int(i) for i in np.asarray(output_ids).reshape(-1) if i != PAD_ID]
