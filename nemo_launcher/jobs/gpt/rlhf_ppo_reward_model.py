"""The reward-model server of rlhf_ppo: scores the actor's rollouts with the frozen reward model.

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_ppo_reward_model --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_ppo_reward_model --config ...   (DP or TP 2)

Binds the whole rlhf_ppo section (contract/schemas/rlhf_ppo.py PpoConfig) and reads its `reward_model` part: loads
reward_model.model.restore_from_path (a reward-model .nemo, jobs/rlhf/reward_model.py) at its tensor-parallel size
over reward_model.trainer's processes, listens on reward_model.port (rank 0) and answers, until the actor's /shutdown:
    POST /rewards {"tokens": [[int]]} -> {"rewards": [float]}   the scalar at each sequence's last token
                                                               (standardized with reward_standardization when on)
    GET /health -> {"ready": true, "role": "reward_model", "vocab_size": ...}
Not started when critic.trainer.ppo.combine_rm_and_critic_server is true (the critic serves /rewards then).
Exit codes: 0 after /shutdown, 1 a port in use or a failure, 2 a configuration error.
"""

import sys

from ...contract.rlhf_roles import REWARD_MODEL
from ..rlhf.servers import run_role

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_ppo_reward_model"


def build(cfg, placement, server):
    from ..core.standalone import on_gpu
    from ..rlhf.reward_model import load_scalar_model
    from ..rlhf.servers import rewards_handler
    from .converter import GPT

    role = cfg.reward_model
    model, tokenizer, _ = load_scalar_model(
        GPT,
        role.model.restore_from_path,
        role.model.tensor_model_parallel_size,
        role.trainer.precision_name(),
        on_gpu(),
    )
    shift, scale = role.model.reward_standardization.shift_and_scale()
    server.handlers["rewards"] = rewards_handler(
        model, tokenizer.vocab_size, role.model.inference_micro_batch_size, shift, scale
    )
    server.info["vocab_size"] = tokenizer.vocab_size
    if placement.rank == 0:
        print(f"reward_model: {role.model.restore_from_path} (TP={role.model.tensor_model_parallel_size})", flush=True)
    return None


def main(argv=None) -> int:
    return run_role(argv, PROG, REWARD_MODEL, build)


if __name__ == "__main__":
    sys.exit(main())
