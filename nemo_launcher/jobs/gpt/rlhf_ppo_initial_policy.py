"""The initial-policy server of rlhf_ppo: the frozen starting policy, the reference of PPO's KL penalty.

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy --config ...   (DP or TP 2)

Binds the whole rlhf_ppo section (contract/schemas/rlhf_ppo.py PpoConfig) and reads its `initial_policy` part: loads
initial_policy.model.restore_from_path (the SFT GPT .nemo) at its tensor-parallel size over initial_policy.trainer's
processes, listens on initial_policy.port (rank 0) and answers, until the actor's /shutdown:
    POST /logprobs {"tokens": [[int]]} -> {"logprobs": [[float]]}   entry t: log p(tokens[t+1] | tokens[:t+1])
    GET /health -> {"ready": true, "role": "initial_policy", "vocab_size": ...}
The log-probabilities are computed as the actor computes its own (log-softmax over the full-vocabulary logits), so
the KL of an unchanged policy is 0. Not started when initial_policy.serve is false.
Exit codes: 0 after /shutdown, 1 a port in use or a failure, 2 a configuration error.
"""

import sys

from ...contract.rlhf_roles import INITIAL_POLICY
from ..rlhf.servers import run_role

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_ppo_initial_policy"


def build(cfg, placement, server):
    from ..rlhf.servers import logprobs_handler
    from .inference import load_gpt_from_nemo

    role = cfg.initial_policy
    model, tokenizer = load_gpt_from_nemo(
        role.model.restore_from_path, role.model.tensor_model_parallel_size, 1, role.trainer.precision_name()
    )
    server.handlers["logprobs"] = logprobs_handler(model, tokenizer.vocab_size, role.model.inference_micro_batch_size)
    server.info["vocab_size"] = tokenizer.vocab_size
    if placement.rank == 0:
        print(
            f"initial_policy: {role.model.restore_from_path} (TP={role.model.tensor_model_parallel_size})", flush=True
        )
    return None


def main(argv=None) -> int:
    return run_role(argv, PROG, INITIAL_POLICY, build)


if __name__ == "__main__":
    sys.exit(main())
