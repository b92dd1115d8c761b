"""Triton Python backend of the stable_diffusion and instruct_pix2pix entries the export writes (copied to
<entry>/1/model.py): the whole pipeline (tokenizer, text encoder, denoising loop, VAE) per request, its graphs under
onnxruntime, through serving.py's DiffusionServer. config.pbtxt's parameter launcher_path names the repository whose
`nemo_launcher` package this imports (with torch, diffusers, onnxruntime). Serve with

    tritonserver --model-repository <out_path>/model_repo --model-control-mode=explicit --load-model stable_diffusion
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

        prefer_utf8()  # before torch is imported (see there)
        from nemo_launcher.jobs.stable_diffusion.serving import DiffusionServer

        self.server = DiffusionServer.load(os.path.join(args["model_repository"], str(args["model_version"])))

    def execute(self, requests):
        from nemo_launcher.jobs.serving.triton_backend import named_inputs, respond

        names = [spec.name for spec in self.server.inputs]
        return respond(requests, lambda request: self.server.answer(named_inputs(request, names)))

    def finalize(self):
        self.server = None
