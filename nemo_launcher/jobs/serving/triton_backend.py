"""What the Triton Python backend models the exports write (serving/triton_text_model.py, clip/triton_clip_model.py,
stable_diffusion/triton_model.py) share once their `initialize` has put the launcher on sys.path.

    prefer_utf8()                                        # first, before torch is imported
    return respond(requests, lambda request: server.answer(named_inputs(request, ("prompt", "max_tokens"))))

Imported only inside tritonserver's embedded Python, where `triton_python_backend_utils` exists.
"""

import locale
from collections.abc import Callable, Iterable


class RequestFailed(Exception):
    """Raised by an answer function with a Triton error of its own (e.g. that of a BLS request it made)."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def named_inputs(request, names: Iterable[str]) -> dict[str, object | None]:
    """Each named input tensor of the request as a NumPy array (None where the request leaves an optional one out)."""
    import triton_python_backend_utils as pb_utils

    inputs = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        inputs[name] = None if tensor is None else tensor.as_numpy()
    return inputs


def respond(requests, answer: Callable[[object], dict[str, object]]) -> list[object]:
    """One response per request: `answer(request)`'s arrays as output tensors by name. A ValueError (bad input) or a
    RequestFailed fails that request alone, with its message; the model stays up for the next ones."""
    import triton_python_backend_utils as pb_utils

    responses = []
    for request in requests:
        try:
            outputs = answer(request)
        except RequestFailed as failure:
            responses.append(pb_utils.InferenceResponse(output_tensors=[], error=failure.error))
            continue
        except ValueError as error:
            responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(error))))
            continue
        responses.append(
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in outputs.items()])
        )
    return responses


def prefer_utf8() -> None:
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
