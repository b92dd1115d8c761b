"""What the Triton model clip_trt answers, shared by its Python backend (1/model.py, triton_clip_model.py) and by
PyTriton, so both servers score with the same code: the texts are tokenized as training did, encoded by the text
graph under onnxruntime, and scored against the image's features, which the caller gets from clip_vision_trt (the
backend through a BLS request, PyTriton in-process).

    scorer = ClipScorer.load("<model_repo>/clip_trt/1")
    outputs = scorer.answer(image_features, np.array([b"a red circle", b"a blue square"], dtype=object))
    -> {"similarities": [n], "logits": [n], "probabilities": [n]} float32

| tensor        | direction | type   | shape     | meaning                                              |
|---------------|-----------|--------|-----------|------------------------------------------------------|
| image         | input     | FP32   | [3, H, W] | the image as evaluation crops and normalises it      |
| texts         | input     | STRING | [-1]      | UTF-8 texts to score the image against               |
| similarities  | output    | FP32   | [-1]      | cosine of the image's and each text's embeddings     |
| logits        | output    | FP32   | [-1]      | the learned temperature x similarities               |
| probabilities | output    | FP32   | [-1]      | softmax of the logits over the texts                 |
clip_trt takes no batch dimension (one image per request); clip_vision_trt takes images [b, 3, H, W].
"""

import json
import types
from pathlib import Path

import numpy as np

from ..serving.text import TensorSpec

SETTINGS_FILE = "clip_serving.json"  # in clip_trt's version folder: text length, temperature, tokenizer, graph
TEXT_GRAPH = "clip_text.onnx"
IMAGE_FEATURES = "image_features"


def clip_tensors(height: int, width: int) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    inputs = (TensorSpec("image", "TYPE_FP32", (3, height, width)), TensorSpec("texts", "TYPE_STRING", (-1,)))
    outputs = tuple(TensorSpec(name, "TYPE_FP32", (-1,)) for name in ("similarities", "logits", "probabilities"))
    return inputs, outputs


class ClipScorer:
    def __init__(self, text_session, tokenizer, text_length: int, logit_scale: float, max_batch_size: int):
        self.text_session, self.tokenizer = text_session, tokenizer
        self.text_length, self.logit_scale, self.max_batch_size = text_length, logit_scale, max_batch_size

    @classmethod
    def load(cls, version_dir) -> "ClipScorer":
        import onnxruntime

        from ..multimodal.caption_tokenizer import load_clip_tokenizer

        folder = Path(version_dir)
        settings = json.loads((folder / SETTINGS_FILE).read_text())
        files = {key: str(folder / name) if name else None for key, name in settings["tokenizer_files"].items()}
        tokenizer = load_clip_tokenizer(types.SimpleNamespace(library=settings["tokenizer_library"], **files))
        session = onnxruntime.InferenceSession(
            str(folder / TEXT_GRAPH), providers=onnxruntime.get_available_providers()
        )
        return cls(session, tokenizer, settings["text_length"], settings["logit_scale"], settings["max_batch_size"])

    def text_features(self, texts) -> np.ndarray:
        rows = np.array([self.tokenizer.encode(text, self.text_length) for text in texts], dtype=np.int64)
        return np.concatenate(
            [
                self.text_session.run(None, {"tokens": rows[i : i + self.max_batch_size]})[0]
                for i in range(0, len(rows), self.max_batch_size)
            ]
        )

    def answer(self, image_features: np.ndarray, texts: np.ndarray) -> dict[str, np.ndarray]:
        """image_features [1, d]; texts: an array of UTF-8 bytes (or str). A request without texts is a ValueError."""
        from .similarity import scores

        decoded = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in np.asarray(texts).reshape(-1)]
        if not decoded:
            raise ValueError("texts: give one or more texts to score the image against")
        rows = scores(image_features, self.text_features(decoded), self.logit_scale, decoded)
        return {
            name: np.array([row[key] for row in rows], dtype=np.float32)
            for name, key in (("similarities", "similarity"), ("logits", "logit"), ("probabilities", "probability"))
        }
