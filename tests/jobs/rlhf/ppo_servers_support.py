"""The resolved rlhf_ppo section of conf/rlhf_ppo/gpt3/tiny.yaml for the PPO job tests, and rows to send the roles.

section = ppo_section(sft_nemo, preference_dir, work, ports=[rm, policy, critic], reward_nemo=None)
"""

from pathlib import Path

from nemo_launcher.contract import preference_data as pd

REPO_CONF = Path(__file__).resolve().parents[3] / "conf"

# Eight token rows of the tiny 2,048-token vocabulary, of several lengths (two global batches of the tiny critic).
ROWS = [
    [5, 17, 300, 41, 9, 1023, 77],
    [8, 8, 2000, 3],
    [100, 200, 300, 400, 500],
    [11, 12],
    [1500, 20, 21, 22, 23, 24, 25, 26, 27],
    [42, 43, 44],
    [7, 600, 601, 602, 603, 604],
    [900, 901, 902, 903, 904, 905, 906, 907, 908, 909],
]


def ppo_section(sft_nemo: str, data_dir, work, ports: list[int], reward_nemo: str | None = None) -> dict:
    """conf/rlhf_ppo/gpt3/tiny.yaml on its family file, resolved as Hydra composes it, with the tiny SFT policy as
    the actor and the initial policy, `reward_nemo` (default: the SFT .nemo, which gets a seeded fresh head) as the
    reward model and the critic's start, the tiny set's prompts, logs under `work` and the given ports."""
    from omegaconf import OmegaConf

    from nemo_launcher.launch.resolvers import register_resolvers

    register_resolvers()  # the family file computes its inference micro-batches with ${divide_ceil:...}

    def layer(path: Path):
        loaded = OmegaConf.load(path)
        return OmegaConf.create({key: value for key, value in loaded.items() if key != "defaults"})

    section = OmegaConf.merge(
        layer(REPO_CONF / "_family" / "gpt3_ppo.yaml"), layer(REPO_CONF / "rlhf_ppo/gpt3/tiny.yaml")
    )
    root = OmegaConf.create({"base_results_dir": str(work), "data_dir": str(data_dir), "cluster": {"gpus_per_node": 1}})
    root.rlhf_ppo = section
    root.rlhf_ppo.reward_model.model.restore_from_path = reward_nemo or sft_nemo
    root.rlhf_ppo.actor.pretrained_checkpoint.restore_from_path = sft_nemo
    root.rlhf_ppo.reward_model.port, root.rlhf_ppo.initial_policy.port, root.rlhf_ppo.critic.trainer.ppo.port = ports
    for split in ("train", "validation"):
        root.rlhf_ppo.actor.model.data.data_prefix[split] = pd.prompts_file(str(data_dir), split)
    return OmegaConf.to_container(root, resolve=True)["rlhf_ppo"]
