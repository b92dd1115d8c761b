"""Send a prompt to a served GPT model and print the answer.

    python3 deployment/client.py --url http://127.0.0.1:8000 --model gpt3_tiny --prompt "The capital of France is"
    python3 deployment/client.py --url grpc://127.0.0.1:8001 --model gpt3_tiny --prompt "..." --max-tokens 16 --ids

Talks the plain Triton protocol (through PyTriton's ModelClient), so it works against serve_pytriton.py and
against tritonserver running the exported repository. Needs only numpy and nvidia-pytriton/tritonclient.
"""

import argparse
import sys

PAD_ID = -1  # fills output_ids after the answer ends (nemo_launcher/jobs/serving/text.py)


def ask(url: str, model: str, prompt: str, max_tokens=None, timeout_s: float = 120.0):
    """(answer text, generated token ids) for one prompt."""
    import warnings

    import numpy as np
    from pytriton.client import ModelClient
    from pytriton.client.warnings import NotSupportedTimeoutWarning

    inputs = {"prompt": np.array([prompt.encode("utf-8")], dtype=np.object_)}
    if max_tokens is not None:
        inputs["max_tokens"] = np.array([max_tokens], dtype=np.int32)
    with warnings.catch_warnings():
        # PyTriton warns on every grpc:// client that only inference calls take a timeout; timeout_s still bounds
        # the wait for the model and the answer, so the warning says nothing the user can act on.
        warnings.simplefilter("ignore", NotSupportedTimeoutWarning)
        with ModelClient(url, model, init_timeout_s=timeout_s, inference_timeout_s=timeout_s) as client:
            result = client.infer_sample(**inputs)
    text = result["completion"].reshape(-1)[0]
    ids = [int(i) for i in result["output_ids"].reshape(-1) if i != PAD_ID]
    return (text.decode("utf-8") if isinstance(text, bytes) else str(text)), ids


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="http://host:port or grpc://host:port")
    parser.add_argument("--model", required=True, help="the served model's name (its folder in the repository)")
    parser.add_argument("--prompt", required=True)
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="new tokens at most (default: the model's setting)"
    )
    parser.add_argument("--ids", action="store_true", help="also print the generated token ids")
    args = parser.parse_args(argv)
    text, ids = ask(args.url, args.model, args.prompt, args.max_tokens)
    print(text)
    if args.ids:
        print("ids:", " ".join(map(str, ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
