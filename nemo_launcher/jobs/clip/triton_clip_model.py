"""Triton Python backend of clip_trt, as the vision export writes it (copied to clip_trt/1/model.py): one image and
a list of texts per request; the image's features come from clip_vision_trt through a BLS request (load both
models), the texts are tokenized and encoded here (clip_text.onnx under onnxruntime), and the scores are
clip/serving.py's ClipScorer. config.pbtxt's parameters: launcher_path (the repository whose `nemo_launcher`
package this imports, with numpy, onnxruntime and, for CLIP's BPE, transformers) and vision_model.
"""

import json
import os
import sys


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        launcher_path = parameters.get("launcher_path")
        if launcher_path and launcher_path not in sys.path:
            sys.path.insert(0, launcher_path)
        from nemo_launcher.jobs.serving.triton_backend import prefer_utf8

        prefer_utf8()  # before the tokenizer's libraries import torch (see there)
        from nemo_launcher.jobs.clip.serving import ClipScorer

        self.scorer = ClipScorer.load(os.path.join(args["model_repository"], str(args["model_version"])))
        self.vision_model = parameters.get("vision_model", "clip_vision_trt")

    def execute(self, requests):
        from nemo_launcher.jobs.serving.triton_backend import respond

        return respond(requests, self._answer)

    def _answer(self, request):
        import numpy as np
        import triton_python_backend_utils as pb_utils

        from nemo_launcher.jobs.clip.serving import IMAGE_FEATURES
        from nemo_launcher.jobs.serving.triton_backend import RequestFailed

        image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().astype(np.float32)
        texts = pb_utils.get_input_tensor_by_name(request, "texts").as_numpy()
        vision = pb_utils.InferenceRequest(
            model_name=self.vision_model,
            requested_output_names=[IMAGE_FEATURES],
            inputs=[pb_utils.Tensor("images", image[np.newaxis])],
        ).exec()
        if vision.has_error():
            raise RequestFailed(vision.error())
        return self.scorer.answer(pb_utils.get_output_tensor_by_name(vision, IMAGE_FEATURES).as_numpy(), texts)

    def finalize(self):
        self.scorer = None
