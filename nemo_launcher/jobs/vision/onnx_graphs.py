"""The saved vision models as ONNX graphs with a dynamic batch, and the check of each graph under onnxruntime
against the model itself.

    graphs = model_graphs(saved, max_dim=224, max_text=64)        # [Graph("vit", module, inputs, outputs), ...]
    export_graph(graph, "/out/onnx/vit.onnx")
    worst = check_graph(graph, "/out/onnx/vit.onnx", batch_sizes=(1, 64))   # max |onnxruntime - torch|

| graph       | input                        | output                              |
|-------------|------------------------------|-------------------------------------|
| vit         | images [b, 3, H, W] float32  | logits [b, classes]                 |
| clip_vision | images [b, 3, H, W] float32  | image_features [b, d] (unit length) |
| clip_text   | tokens [b, max_text] int64   | text_features [b, d] (unit length)  |

Two things in megatron-core's local layers keep torch.onnx.export (TorchScript tracing) from working as they are:
its attention takes a preallocated buffer from the global memory buffer, whose fixed shape the trace would bake in
(a graph that only runs at the traced batch size), and its linear layers report an empty `_extra_state` (None) that
the tracer cannot detach. exportable() swaps the buffer for a fresh zero tensor shaped from the traced sizes (the
product is computed with beta 0, so its values never matter) and drops the empty entries, for the export only.
"""

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

OPSET = 17


@dataclasses.dataclass(frozen=True)
class Graph:
    name: str  # file stem: <name>.onnx, <name>.plan
    module: torch.nn.Module  # inputs -> one output tensor
    inputs: dict[str, Callable[[int, torch.Generator], torch.Tensor]]  # input name -> example of batch b
    output: str


class _ImageClassifier(torch.nn.Module):
    def __init__(self, chunk):
        super().__init__()
        self.chunk = chunk

    def forward(self, images):
        return self.chunk(images).float()


class _ImageEncoder(_ImageClassifier):
    def forward(self, images):
        return self.chunk.encode_image(images)


class _TextEncoder(_ImageClassifier):
    def forward(self, tokens):
        return self.chunk.encode_text(tokens)


def _pixels(height: int, width: int):
    return lambda batch, generator: torch.randn(batch, 3, height, width, generator=generator)


def _token_rows(tokenizer, length: int, vocab: int):
    """Rows as the tokenizer lays them out (start, tokens, end, padding), with random tokens of random lengths."""

    def make(batch: int, generator: torch.Generator) -> torch.Tensor:
        specials = torch.tensor(sorted({tokenizer.bos, tokenizer.eos, tokenizer.pad}))
        ordinary = next(i for i in range(vocab) if i not in specials.tolist())
        rows = torch.full((batch, length), tokenizer.pad, dtype=torch.long)
        for row in rows:
            used = int(torch.randint(1, length - 1, (1,), generator=generator))
            body = torch.randint(0, vocab, (used,), generator=generator)
            body = torch.where(torch.isin(body, specials), torch.full_like(body, ordinary), body)
            row[0], row[1 : used + 1], row[used + 1] = tokenizer.bos, body, tokenizer.eos
        return rows

    return make


def model_graphs(saved, max_dim: int, max_text: int = 0) -> list[Graph]:
    height, width = saved.image_size
    if not saved.record.reads_text:  # an image classifier: one graph, pixels -> logits
        return [Graph("vit", _ImageClassifier(saved.module).eval(), {"images": _pixels(height, width)}, "logits")]
    vocab = saved.tokenizer.vocab_size
    return [
        Graph("clip_vision", _ImageEncoder(saved.module).eval(), {"images": _pixels(height, width)}, "image_features"),
        Graph(
            "clip_text",
            _TextEncoder(saved.module).eval(),
            {"tokens": _token_rows(saved.tokenizer, max_text, vocab)},
            "text_features",
        ),
    ]


@contextlib.contextmanager
def exportable(module: torch.nn.Module):
    from megatron.core import parallel_state

    buffer = parallel_state.get_global_memory_buffer()

    def fresh(shape, dtype, name, *args, **kwargs):
        return torch.zeros(shape, dtype=dtype)

    def drop_empty(module, state, prefix, metadata):
        for key in [key for key, value in state.items() if value is None]:
            del state[key]

    hook = module._register_state_dict_hook(drop_empty)
    buffer.get_tensor = fresh  # an instance attribute shadows the method until it is deleted below
    try:
        with warnings.catch_warnings():
            # The tracer's notes on Python values taken from tensors (sizes, asserts): the graph is checked below
            # at several batch sizes instead. The legacy-exporter notice: the dynamo exporter needs onnxscript.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings(
                "ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning
            )
            # The text tower gathers each row's features at its end token: the indices are non-negative positions
            # (argmax and arange), the case that note says is exported right.
            warnings.filterwarnings("ignore", "Exporting aten::index operator of advanced indexing", UserWarning)
            yield
    finally:
        del buffer.get_tensor
        hook.remove()


def export_graph(graph: Graph, path: str, example_batch: int = 2) -> None:
    generator = torch.Generator().manual_seed(0)
    device = next(graph.module.parameters()).device
    example = tuple(make(example_batch, generator).to(device) for make in graph.inputs.values())
    names = list(graph.inputs)
    axes = {name: {0: "batch"} for name in names + [graph.output]}
    with exportable(graph.module), torch.no_grad():
        torch.onnx.export(
            graph.module,
            example,
            path,
            input_names=names,
            output_names=[graph.output],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def check_graph(graph: Graph, path: str, batch_sizes: Sequence[int], seed: int = 1234) -> float:
    """The largest |onnxruntime - framework| over the graph's output for batches of each size."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(seed)
    device = next(graph.module.parameters()).device
    worst = 0.0
    for batch in batch_sizes:
        inputs = {name: make(batch, generator) for name, make in graph.inputs.items()}
        with torch.no_grad():
            expected = graph.module(*(t.to(device) for t in inputs.values())).float().cpu().numpy()
        (got,) = session.run([graph.output], {name: t.numpy() for name, t in inputs.items()})
        if got.shape != expected.shape:
            raise AssertionError(f"{path}: output shape {got.shape} at batch {batch}, framework {expected.shape}")
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst
