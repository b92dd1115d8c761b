"""The rlhf_ppo actor (jobs/gpt/rlhf_ppo_actor.py) driving the real server roles as local processes on free ports,
from the tiny SFT policy and the tiny reward model: the policy's reward on held-out prompts rises while its KL to the
initial policy stays bounded; a kill -9 of the actor and a rerun of every role continue bit-identically;
trainer.max_time and SIGTERM save and stop (exit 0, resume marker); a role that dies stops the actor naming it.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_ppo_actor_run.py -q
"""

import copy
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from nemo_launcher.contract import RESUME_MARKER
from nemo_launcher.contract.schemas.rlhf_ppo import PpoConfig

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..rlhf_support import preference_dir, rlhf_reward_nemo, rlhf_sft_nemo  # noqa: F401  (fixtures)
from ..server_ports import server_ports
from ..sft_support import assert_same_tensors, tiny_nemo  # noqa: F401  (fixture)
from .ppo_actor_support import PpoJob, actor_dir, critic_nemo, metrics, policy_nemo, set_keys
from .ppo_servers_support import ppo_section

# The tiny config made to learn within seconds: 20 PPO steps of 32 rollouts (4 policy updates of 8 each), a learning
# rate the tiny policy moves with, validation on 64 rollouts (the 16 validation prompts, 4 draws each) at steps 0, 10
# and 20, a save every 5 steps. The critic saves at the seed's interval (10 x actor GBS 8 / critic GBS 4).
LEARNING = {
    "actor.trainer.ppo.max_steps": 20,
    "actor.trainer.ppo.val_check_interval": 10,
    "actor.trainer.ppo.save_interval": 5,
    "actor.model.optim.lr": 1e-3,
    "actor.model.optim.sched.min_lr": 1e-4,
    "actor.model.ppo.num_rollout_samples": 32,
    "actor.model.global_batch_size": 8,
    "actor.model.micro_batch_size": 8,
    "actor.model.ppo.num_val_samples": 64,
    "actor.model.ppo.val_rollout_micro_batch_size": 16,
    "critic.exp_manager.checkpoint_callback_params.every_n_train_steps": 20,
}
# Measured here (OMP_NUM_THREADS=1): val_global_rewards -1.996 (step 0) -> -1.616 (step 10) -> -0.785 (step 20), the
# KL estimate summed over a response's tokens 0 -> 1.159 -> 1.380 nats (initial_policy_kl_penalty 0.01); the training
# rollouts' mean reward -1.962 (step 1) -> -0.699 (step 20). The validation reward is a mean over 64 responses drawn
# with the same random numbers each time; a rise of 0.5 is several times what a policy that did not move would show.
KL_BOUND = 3.0
REWARD_RISE = 0.5


def learning_section(sft: str, reward: str, data, work: Path) -> dict:
    section = set_keys(ppo_section(sft, data, work, server_ports(3), reward_nemo=reward), dict(LEARNING))
    PpoConfig.from_dict(section)  # as the launcher binds it: a test of a config the launcher refuses proves nothing
    return section


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, rlhf_sft_nemo, rlhf_reward_nemo, preference_dir):  # noqa: F811
    """One whole uninterrupted job, shared by the tests: (section, job, actor exit status, servers' exit statuses)."""
    work = tmp_path_factory.mktemp("ppo_actor")
    section = learning_section(rlhf_sft_nemo, rlhf_reward_nemo, preference_dir, work)
    job = PpoJob(section, work)
    job.start_servers()
    try:
        rc = job.run_actor()
        servers = job.wait_servers_exit()
    finally:
        job.stop()
    return section, job, rc, servers


def test_reward_rises_while_the_kl_to_the_initial_policy_stays_bounded(uninterrupted):
    section, job, rc, servers = uninterrupted
    log = job.text("actor")
    assert rc == 0, log[-4000:]
    assert servers == {"reward_model": 0, "initial_policy": 0, "critic": 0}  # each ended by the actor's /shutdown
    records = metrics(section)
    assert [r["step"] for r in records] == list(range(21))
    validations = {r["step"]: r for r in records if "val_global_rewards" in r}
    assert sorted(validations) == [0, 10, 20]
    first, last = validations[0]["val_global_rewards"], validations[20]["val_global_rewards"]
    assert last - first > REWARD_RISE, [(s, v["val_global_rewards"], v["val_kl"]) for s, v in validations.items()]
    assert validations[0]["val_kl"] == pytest.approx(0.0, abs=1e-4)  # the policy is the initial policy then
    assert all(v["val_kl"] < KL_BOUND for v in validations.values()), validations
    # Step 1's rollouts come from the initial policy itself: its KL is 0 up to the servers' float rounding.
    assert abs(records[1]["kl"]) < 1e-4
    for key in ("reward", "kl", "policy_loss", "critic_loss", "entropy", "response_length", "clip_fraction"):
        assert all(key in r for r in records[1:]), key
    assert all(1 <= r["response_length"] <= 8 for r in records[1:])
    assert "val_global_rewards" in log and "KL to the initial policy" in log  # the summary
    # A plain GPT .nemo that conversion and evaluation read, with weights moved away from the SFT policy's.
    from nemo_launcher.jobs.core.nemo_archive import load_nemo, read_nemo_config
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    assert "reward_model" not in read_nemo_config(policy_nemo(section))
    load_gpt_from_nemo(str(policy_nemo(section)))
    _, trained = load_nemo(policy_nemo(section))
    _, start = load_nemo(section["actor"]["pretrained_checkpoint"]["restore_from_path"])
    assert trained.keys() == start.keys()
    assert any(not trained[k].equal(start[k]) for k in trained)
    # The newest save_top_k(2) complete states are kept; the run finished, so it asks for no requeue.
    saved = sorted(p.name for p in (actor_dir(section) / "ppo_checkpoints").iterdir())
    assert saved == ["step-15", "step-20"]
    assert not (actor_dir(section) / RESUME_MARKER).exists()
    assert list(actor_dir(section).glob("events.out.tfevents.*"))  # TensorBoard


def _moved(section: dict, work: Path) -> dict:
    """The same job with its results under `work` and on fresh ports."""
    moved = copy.deepcopy(section)
    for role in ("actor", "critic"):
        old = Path(section[role]["exp_manager"]["explicit_log_dir"])
        moved[role]["exp_manager"]["explicit_log_dir"] = str(work / old.name)
    moved["run"]["results_dir"] = str(work)
    ports = server_ports(3)
    set_keys(
        moved,
        {
            "reward_model.port": ports[0],
            "initial_policy.port": ports[1],
            "critic.trainer.ppo.port": ports[2],
            "actor.remote_critic_rm.reward_model.port": ports[0],
            "actor.remote_critic_rm.initial_policy.port": ports[1],
            "actor.remote_critic_rm.critic.port": ports[2],
        },
    )
    PpoConfig.from_dict(moved)
    return moved


def _wait_for(path: Path, process, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.02)


def test_kill_9_of_the_actor_then_a_rerun_of_every_role_continues_bit_identically(uninterrupted, tmp_path):
    reference_section = uninterrupted[0]
    section = _moved(reference_section, tmp_path)
    job = PpoJob(section, tmp_path)
    job.start_servers()
    try:
        actor = job.start("actor")
        _wait_for(actor_dir(section) / "ppo_checkpoints" / "step-10" / "COMPLETE", actor, job.log("actor"))
        actor.kill()  # SIGKILL: nothing of the actor runs after this
        actor.wait()
        job.stop()  # the launcher's monitor ends every role when one exits
        assert not policy_nemo(section).exists(), "killed too late to test a resume"
        job.start_servers()  # the whole job again: every role restarted
        rc = job.run_actor()
        assert rc == 0, job.text("actor")[-4000:]
        assert job.wait_servers_exit() == {"reward_model": 0, "initial_policy": 0, "critic": 0}
    finally:
        job.stop()
    assert "resumed from step 10" in job.text("actor")
    assert metrics(section) == metrics(reference_section)  # every step's numbers, the first run's steps included
    from nemo_launcher.jobs.core.nemo_archive import load_nemo

    assert_same_tensors(load_nemo(policy_nemo(section))[1], load_nemo(policy_nemo(reference_section))[1])
    assert_same_tensors(load_nemo(critic_nemo(section))[1], load_nemo(critic_nemo(reference_section))[1])


def test_max_time_and_sigterm_save_and_stop_and_a_role_that_dies_stops_the_actor_naming_it(
    tmp_path,
    rlhf_sft_nemo,  # noqa: F811
    preference_dir,  # noqa: F811
):
    """The reference's two-role layout: the critic also serves the rewards (here from the SFT .nemo with a seeded
    fresh head) and the actor keeps a frozen copy of its starting weights as the KL reference."""
    section = ppo_section(rlhf_sft_nemo, preference_dir, tmp_path, server_ports(3))
    set_keys(
        section,
        {
            "critic.trainer.ppo.combine_rm_and_critic_server": True,
            "actor.remote_critic_rm.combine_rm_and_critic_server": True,
            "initial_policy.serve": False,
            "actor.trainer.ppo.max_steps": 50,
            "actor.trainer.ppo.save_interval": 100,
            "actor.trainer.ppo.val_check_interval": 100,
            "critic.exp_manager.checkpoint_callback_params.every_n_train_steps": 100,
            "critic.model.optim.sched.warmup_steps": 0,
        },
    )
    section["actor"]["trainer"]["max_time"] = "00:00:00:01"  # the first attempt: out of time after its first step
    PpoConfig.from_dict(section)
    job = PpoJob(section, tmp_path)
    assert job.server_roles() == ["critic"]
    job.start_servers()
    try:
        assert job.run_actor() == 0, job.text("actor")[-4000:]
        assert "trainer.max_time (1 s) leaves no room for another step" in job.text("actor")
        assert (actor_dir(section) / "ppo_checkpoints" / "step-1" / "COMPLETE").exists()
        assert (actor_dir(section) / RESUME_MARKER).exists()
        records = metrics(section)
        assert [r["step"] for r in records] == [0, 1]
        assert abs(records[1]["kl"]) < 1e-5  # the frozen copy inside the actor is the policy at step 1
        # The requeued attempt, with no time limit, resumes; SIGTERM stops it after a step.
        section["actor"]["trainer"]["max_time"] = None
        job.config.write_text(yaml.safe_dump(section))
        job.attempt += 1
        actor = job.start("actor")
        _wait_for_line(job, actor, "ppo step 3/50")
        assert not (actor_dir(section) / RESUME_MARKER).exists()  # a crash of a running attempt must not requeue
        os.kill(actor.pid, signal.SIGTERM)
        assert actor.wait(timeout=120) == 0, job.text("actor")[-4000:]
        stopped = job.text("actor")
        assert "stopped after step" in stopped
        step = int(stopped.split("stopped after step ")[1].split(" ")[0])
        assert (actor_dir(section) / "ppo_checkpoints" / f"step-{step}" / "COMPLETE").exists()
        assert "resumed from step 1" in stopped
        assert (actor_dir(section) / RESUME_MARKER).exists()  # the Slurm script requeues the job on it
        assert [r["step"] for r in metrics(section)] == list(range(step + 1))
        # The next attempt resumes; then the critic dies under it.
        job.attempt += 1
        actor = job.start("actor")
        _wait_for_line(job, actor, f"ppo step {step + 1}/50")
        job.processes["critic"].kill()
        rc = actor.wait(timeout=120)
    finally:
        job.stop()
    log = job.text("actor")
    assert f"resumed from step {step}" in log
    assert rc == 1, log[-4000:]
    errors = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "critic" in errors[0], log[-3000:]


def _wait_for_line(job: PpoJob, process, text: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in job.text("actor"):
        assert process.poll() is None, job.text("actor")[-4000:]
        assert time.monotonic() < deadline, f"no {text!r} within {timeout_s} s"
        time.sleep(0.05)
