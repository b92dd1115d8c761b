"""A GPT `.nemo` (written at any TP/PP: an import, a fine-tuned model, a merged LoRA) -> a Hugging Face folder that
transformers loads as the class computing the same logits (GPT-2, Llama, Qwen2 or Mixtral; hf_export.py).

    python3 -m nemo_launcher.jobs.gpt.nemo_to_hf --nemo llama2_7b.nemo --output /results/hf [--dtype bfloat16]

Works on state dicts on the CPU (no process group, no GPU): the archive's shards are merged by GPT's shard rules
first. A model with no exact Hugging Face counterpart is refused with the keys in the way (exit 2).
"""

import argparse
import sys

DTYPES = ("float32", "bfloat16", "float16")


def export_nemo(nemo: str, output: str, dtype: str | None = None) -> str:
    """Writes the folder; returns the Hugging Face class written."""
    import torch

    from .converter import write_hf_folder
    from .inference import load_gpt_nemo

    config, state = load_gpt_nemo(nemo)
    return write_hf_folder(config, state, output, getattr(torch, dtype) if dtype else None)


def main(argv=None) -> int:
    from ..common.config import JobConfigError
    from ..common.errors import JobError
    from ..common.quiet import start_job
    from ..common.report import print_error

    parser = argparse.ArgumentParser(
        prog="python3 -m nemo_launcher.jobs.gpt.nemo_to_hf", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nemo", required=True, help="the .nemo to export")
    parser.add_argument(
        "--output", required=True, help="the folder to write (created; files of the same names replaced)"
    )
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="dtype of the written weights; default as stored")
    args = parser.parse_args(argv)
    start_job(accelerators=False)
    try:
        architecture = export_nemo(args.nemo, args.output, args.dtype)
    except (JobConfigError, JobError) as error:  # HFExportError: no class computes this model
        return print_error(error)
    print(f"Hugging Face {architecture}: {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
