"""Run by test_reward_model_module.py under torchrun (2 processes, TP=2): loads a scalar-head model, scores the rows
given and writes them (rank 0), then saves the model as a sharded `.nemo`.

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 -m tests.jobs.rlhf.scalar_model_worker \\
        IN.nemo ROWS.json OUT.json SAVED.nemo
"""

import json
import sys

import torch

from nemo_launcher.jobs.gpt.converter import GPT
from nemo_launcher.jobs.rlhf.reward_model import load_scalar_model, save_scalar_model, scores


def main(source: str, rows_file: str, out_file: str, saved: str) -> None:
    from nemo_launcher.jobs.common.distributed import placement_from_env

    model, _, nemo_config = load_scalar_model(GPT, source, tp=2, precision="fp32", on_gpu=False)
    rows = json.loads(open(rows_file).read())
    width = max(len(row) for row in rows)
    tokens = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    lengths = torch.tensor([len(row) for row in rows])
    with torch.no_grad():
        values = scores(model, tokens, lengths)
    placement = placement_from_env()
    if placement.rank == 0:
        open(out_file, "w").write(json.dumps(values.tolist()))
    save_scalar_model(model, nemo_config, saved, "rlhf_rm", placement)


if __name__ == "__main__":
    main(*sys.argv[1:])
