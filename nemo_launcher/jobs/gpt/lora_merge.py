"""Merge a LoRA adapter file into its base model: a plain GPT `.nemo` that needs no adapter code to run.

    python3 -m nemo_launcher.jobs.gpt.lora_merge --base megatron_gpt.nemo --adapter megatron_gpt_peft_lora.nemo \
        --output megatron_gpt_merged.nemo

Works on state dicts on the CPU (no process group, no GPU); a TP-sharded base is merged into one TP=1
model first. The PEFT job does the same merge in place at the end of training (model.peft.merge: true).
"""

import argparse
import sys


def merge_files(base: str, adapter: str, output: str) -> str:
    from ..core.nemo_archive import save_nemo
    from ..tuning.lora_file import load_adapter_file, merge_into_state_dict
    from .inference import load_gpt_nemo

    settings, state = load_adapter_file(adapter)
    config, weights = load_gpt_nemo(base)
    save_nemo(output, config, merge_into_state_dict(weights, settings, state))
    return output


def main(argv=None) -> int:
    from ..common.config import JobConfigError
    from ..common.quiet import start_job
    from ..common.report import print_error

    parser = argparse.ArgumentParser(
        prog="python3 -m nemo_launcher.jobs.gpt.lora_merge", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--base", required=True, help="the .nemo the adapters were trained on")
    parser.add_argument("--adapter", required=True, help="the adapter file the peft job wrote")
    parser.add_argument("--output", required=True, help="where to write the merged .nemo")
    args = parser.parse_args(argv)
    start_job(accelerators=False)
    try:
        print(f"merged model: {merge_files(args.base, args.adapter, args.output)}", flush=True)
    except JobConfigError as error:
        return print_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
