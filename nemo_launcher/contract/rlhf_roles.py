"""The PPO job's roles, named once for both sides: the launcher places them (one heterogeneous Slurm group each, or
one local process group each) and exports each server's host; the job programs read that host back.

    ROLE_PROGRAMS["critic"]         -> "rlhf_ppo_critic"   (the family row maps a program kind to its module)
    HOST_VARIABLES["critic"]        -> "NEMO_RLHF_CRITIC_HOST"

The actor is the only client; it has no server and so no host variable.
"""

REWARD_MODEL, INITIAL_POLICY, CRITIC, ACTOR = "reward_model", "initial_policy", "critic", "actor"

# Het-group order: the servers first (the actor needs them up), the actor last.
ROLE_ORDER = (REWARD_MODEL, INITIAL_POLICY, CRITIC, ACTOR)

ROLE_PROGRAMS = {role: f"rlhf_ppo_{role}" for role in ROLE_ORDER}

HOST_VARIABLES = {role: f"NEMO_RLHF_{role.upper()}_HOST" for role in (REWARD_MODEL, INITIAL_POLICY, CRITIC)}
