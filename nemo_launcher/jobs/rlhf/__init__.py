"""RLHF shared by the GPT programs (jobs/gpt/rlhf_*.py): the scalar-head reward model, preference pairs, the DPO loss,
the PPO algorithm, and the protocol the PPO roles speak to each other."""
