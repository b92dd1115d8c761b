"""Runs the actor's own work at the TP size torchrun gives it (1 or 2 processes), with no server: seeded rollouts of
fixed prompts, their log-probabilities, one PPO update on fixed advantages, and the log-probabilities after it.
Rank 0 writes the numbers as JSON to argv[2]. The policy is the .nemo at argv[1].

    torchrun --nproc_per_node=2 tests/jobs/rlhf/ppo_actor_tp_worker.py policy.nemo out.json
"""

import json
import os
import sys

import torch


def main(nemo: str, out: str) -> None:
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo
    from nemo_launcher.jobs.rlhf.actor_loop import PpoActor, PpoSettings
    from nemo_launcher.jobs.rlhf.prompts import Prompt
    from nemo_launcher.jobs.rlhf.rollouts import TokenSampler, step_generator

    tp = int(os.environ.get("WORLD_SIZE", "1"))
    policy, tokenizer = load_gpt_from_nemo(nemo, tp, 1, "fp32")
    settings = PpoSettings(
        seed=5,
        max_steps=1,
        rollouts_per_step=8,
        rollout_micro_batch_size=4,
        forward_micro_batch_size=4,
        val_samples=8,
        val_micro_batch_size=4,
        train_global_batch_size=4,
        train_micro_batch_size=2,
        epochs=1,
        kl_penalty=0.01,
        absolute_kl=False,
        discount=1.0,
        gae_lambda=0.95,
        normalize_advantages=True,
        ratio_eps=0.2,
        entropy_bonus=0.01,
        gradient_clip=1.0,
        sampler=TokenSampler(),
        max_new_tokens=6,
        min_new_tokens=1,
        max_prompt_length=32,
        val_check_interval=1,
        save_interval=1,
        stop_id=tokenizer.eod,
        vocab_size=tokenizer.vocab_size,
    )
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3, foreach=False)
    prompts = [tokenizer.encode(f"Question about the {topic}. Answer:") for topic in ("code", "data", "license")] * 3
    listed = [Prompt(ids, "") for ids in prompts]
    actor = PpoActor(settings, policy, optimizer, listed, listed, None, ".", say=lambda message: None)
    batch = actor.rollouts(prompts[:8], 4, step_generator(settings.seed, 1, "rollouts"))
    mask = batch.response_mask()
    before = actor.policy_logprobs(batch)
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3)) * mask
    update = actor.train_policy(1, batch, before, advantages, mask)
    after = actor.policy_logprobs(batch)
    if int(os.environ.get("RANK", "0")) == 0:
        record = {"tokens": batch.tokens, "before": before.tolist(), "after": after.tolist(), **update}
        with open(out, "w") as handle:
            json.dump(record, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
