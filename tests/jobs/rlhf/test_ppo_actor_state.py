"""The actor's prompt order (jobs/rlhf/prompts.py) and checkpoint folders (jobs/rlhf/actor_state.py): the prompts of
step N follow from N alone, every prompt comes once per pass, a save counts only once complete, and only the newest
save_top_k complete saves stay."""

import json

import pytest

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.jobs.rlhf import actor_state
from nemo_launcher.jobs.rlhf.prompts import PromptOrder, read_prompts


def test_the_order_is_a_seeded_permutation_per_pass_and_a_batch_follows_from_its_position():
    order = PromptOrder(10, seed=7)
    first_pass = order.take(0, 10)
    assert sorted(first_pass) == list(range(10))
    second_pass = order.take(10, 10)
    assert sorted(second_pass) == list(range(10)) and second_pass != first_pass
    # Batches of 4 run over the pass boundary; a fresh order (a resumed run) gives step 3's batch from its position.
    batches = [order.take(4 * step, 4) for step in range(5)]
    assert sum(batches, []) == first_pass + second_pass
    assert PromptOrder(10, seed=7).take(8, 4) == batches[2]
    assert PromptOrder(10, seed=8).take(0, 10) != first_pass


def test_prompts_are_read_and_another_vocabulary_is_refused(tmp_path):
    (tmp_path / "train_prompts.jsonl").write_text(
        json.dumps({"prompt": [5, 6], "text": "a"}) + "\n\n" + json.dumps({"prompt": [7], "text": "b"}) + "\n"
    )
    (tmp_path / "metadata.json").write_text(json.dumps({"tokenizer": {"vocab_size": 2048}}))
    prompts = read_prompts(str(tmp_path / "train_prompts.jsonl"), 2048, "data_prefix.train")
    assert [(p.ids, p.text) for p in prompts] == [([5, 6], "a"), ([7], "b")]
    with pytest.raises(JobConfigError, match=r"data_prefix.train: the data in .* 2048-token vocabulary, .* has 50257"):
        read_prompts(str(tmp_path / "train_prompts.jsonl"), 50257, "data_prefix.train")
    with pytest.raises(JobConfigError, match=r"data_prefix.validation: .*missing.jsonl does not exist"):
        read_prompts(str(tmp_path / "missing.jsonl"), 2048, "data_prefix.validation")
    (tmp_path / "bad.jsonl").write_text('{"text": "no ids"}\n')
    with pytest.raises(JobConfigError, match=r"bad.jsonl line 1 is not a prompt record"):
        read_prompts(str(tmp_path / "bad.jsonl"), 2048)


def test_only_complete_saves_count_and_the_newest_are_kept(tmp_path):
    for step in (2, 4, 6):
        actor_state.save_actor_state(tmp_path, step, {"step": step}, rank=0, writer=True)
        actor_state.mark_complete(tmp_path, step, keep=2)
    # Step 8's file is written but its marker is not (a kill -9 in between): step 6 is the newest complete one.
    actor_state.save_actor_state(tmp_path, 8, {"step": 8}, rank=0, writer=True)
    assert [step for step, _ in actor_state.complete_states(tmp_path)] == [4, 6]
    step, folder = actor_state.newest_actor_state(tmp_path)
    assert step == 6 and actor_state.load_actor_state(folder, rank=0) == {"step": 6}
    assert not (tmp_path / actor_state.FOLDER / "step-2").exists()
    # A rank that is not a writer (a data-parallel copy) writes nothing; keep -1 keeps every save.
    actor_state.save_actor_state(tmp_path, 10, {"step": 10}, rank=1, writer=False)
    assert not (tmp_path / actor_state.FOLDER / "step-10").exists()
    actor_state.mark_complete(tmp_path, 8, keep=-1)
    assert [step for step, _ in actor_state.complete_states(tmp_path)] == [4, 6, 8]
    assert actor_state.newest_actor_state(tmp_path / "elsewhere") is None


def test_a_resume_with_another_rollout_batch_is_refused(tmp_path):
    import torch

    from nemo_launcher.jobs.rlhf.actor_loop import PpoActor, PpoSettings
    from nemo_launcher.jobs.rlhf.prompts import Prompt
    from nemo_launcher.jobs.rlhf.rollouts import TokenSampler

    def settings(rollouts: int) -> PpoSettings:
        return PpoSettings(
            seed=1, max_steps=4, rollouts_per_step=rollouts, rollout_micro_batch_size=1, forward_micro_batch_size=1,
            val_samples=1, val_micro_batch_size=1, train_global_batch_size=1, train_micro_batch_size=1, epochs=1,
            kl_penalty=0.0, absolute_kl=False, discount=1.0, gae_lambda=1.0, normalize_advantages=False,
            ratio_eps=0.2, entropy_bonus=0.0, gradient_clip=0.0, sampler=TokenSampler(), max_new_tokens=1,
            min_new_tokens=0, max_prompt_length=4, val_check_interval=1, save_interval=1, stop_id=0, vocab_size=4,
        )  # fmt: skip

    policy = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(policy.parameters())
    prompts = [Prompt([1, 2], "")]
    # A run with 5 rollouts per step saved step 2; the rerun's config asks for 4.
    state = {"step": 2, "prompt_position": 10, "settings": {"rollouts_per_step": 5}}
    actor_state.save_actor_state(tmp_path, 2, state, rank=0, writer=True)
    actor_state.mark_complete(tmp_path, 2)
    rerun = PpoActor(settings(4), policy, optimizer, prompts, prompts, None, str(tmp_path), say=print)
    with pytest.raises(JobConfigError, match=r"num_rollout_samples=4: the state in .*step-2 was saved with 5; set it"):
        rerun._resume()
