"""Triton Python backend model for a GPT or T5 exported by nemo_launcher (the export job copies this file to
<model dir>/1/model.py). Serve with

    tritonserver --model-repository <results_dir>/model_repo

The weights and tokenizer are <model dir>/1/model.nemo. config.pbtxt's parameters say how to run:
generator (the class that answers; GPT's when absent), data_type (fp32/fp16/bf16), tokens_to_generate (default
new tokens) and launcher_path (the repository whose
`nemo_launcher` package does the work; it must be importable by the server's Python, with torch and
megatron-core installed). The tensors are described in nemo_launcher/jobs/gpt/serving.py.
"""
import json
import locale
import os
import sys


class TritonPythonModel:
    def initialize(self, args):
        _prefer_utf8()
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        launcher_path = parameters.get("launcher_path")
        if launcher_path and launcher_path not in sys.path:
            sys.path.insert(0, launcher_path)
        if args.get("model_instance_kind") == "GPU":
            # Each instance is its own process; before torch starts, show it only the GPU Triton gave it.
            os.environ["CUDA_VISIBLE_DEVICES"] = str(args["model_instance_device_id"])
        from nemo_launcher.jobs.gpt.serving import MODEL_FILE, generator_from_parameters

        weights = os.path.join(args["model_repository"], str(args["model_version"]), MODEL_FILE)
        self.generator = generator_from_parameters(parameters, weights)

    def execute(self, requests):
        import triton_python_backend_utils as pb_utils

        responses = []
        for request in requests:
            inputs = {}
            for name in ("prompt", "max_tokens"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                inputs[name] = None if tensor is None else tensor.as_numpy()
            try:
                outputs = self.generator.answer(inputs)
            except ValueError as error:  # a bad request fails alone; the model stays up
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(error))))
                continue
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()]))
        return responses

    def finalize(self):
        self.generator = None


def _prefer_utf8():
    """The backend's embedded Python starts in the C locale (ASCII) whatever LANG or PYTHONUTF8 say, and torch
    reads its own source templates with the locale's encoding while importing: it fails on their non-ASCII
    bytes. The text encoding follows LC_CTYPE, so switching that before torch is imported is enough."""
    if locale.getpreferredencoding(False).replace("-", "").upper() == "UTF8":
        return
    for name in ("C.UTF-8", "C.utf8", "en_US.UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, name)
            return
        except locale.Error:
            continue
