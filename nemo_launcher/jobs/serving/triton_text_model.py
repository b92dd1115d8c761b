"""Triton Python backend model for a GPT or T5 exported by nemo_launcher (the export job copies this file to
<model dir>/1/model.py). Serve with

    tritonserver --model-repository <results_dir>/model_repo

The weights and tokenizer are <model dir>/1/model.nemo. config.pbtxt's parameters say how to run:
generator (the class that answers; GPT's when absent), data_type (fp32/fp16/bf16), tokens_to_generate (default
new tokens) and launcher_path (the repository whose
`nemo_launcher` package does the work; it must be importable by the server's Python, with torch and
megatron-core installed). The tensors are described in nemo_launcher/jobs/serving/text.py.
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

        prefer_utf8()  # before torch is imported
        if args.get("model_instance_kind") == "GPU":
            # Each instance is its own process; before torch starts, show it only the GPU Triton gave it.
            os.environ["CUDA_VISIBLE_DEVICES"] = str(args["model_instance_device_id"])
        from nemo_launcher.jobs.serving.text import MODEL_FILE, generator_from_parameters

        weights = os.path.join(args["model_repository"], str(args["model_version"]), MODEL_FILE)
        self.generator = generator_from_parameters(parameters, weights)

    def execute(self, requests):
        from nemo_launcher.jobs.serving.triton_backend import named_inputs, respond

        return respond(requests, lambda request: self.generator.answer(named_inputs(request, ("prompt", "max_tokens"))))

    def finalize(self):
        self.generator = None
