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
